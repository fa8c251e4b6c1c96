import { BATCH_KIND, decodeAudioBatch, MAX_BATCH_MESSAGE_BYTES } from "../../schemas/audio-batch";
import type { JsMsg } from "@nats-io/jetstream";
import { randomBytes, randomUUID } from "node:crypto";
import { AUDIO_HEADERS, audioControl, defaultTurnDetection, rtEventEnvelope, type AudioControl, type RtEvent, type TurnDetection } from "../../schemas/realtime";
import type { Logger } from "../../shared/logger";
import { AckPolicy, DeliverPolicy } from "@nats-io/jetstream";
import { isNotFound, type Nats } from "../../shared/nats";
import { releaseMessageData } from "../../shared/nats-parser";
import type { KV } from "@nats-io/kv";
import { hostname } from "node:os";
import { joinPartitionAssignment } from "./partition-assignment";
import { loadVadEngine, VAD_SAMPLE_RATE, type VadEngine, type VadSegmenter } from "../../shared/audio/vad";
import { appendEvents, type NewEvent } from "../../shared/event-store";
import type { StreamDecoderPool } from "./stream-decoders";
import { AudioRing } from "./streaming";
import { decide, initialState, type DecideContext, type DeciderInput, type DeciderState, type Effect, type StartControl } from "./session-decider";
import { dropStream, feedStream, openStream, transcribe, type OpenStream } from "./stream-items";
import { context, trace } from "@opentelemetry/api";
import { tracer } from "../../shared/telemetry";

/**
 * The server VAD: one durable pull consumer per partition of RT_AUDIO
 * (rt.audio.<partition>.<sessionId>), each handled strictly in order by one loop, so a
 * session's audio and its in-band control messages are seen in the order the gateway
 * sent them. Per session it keeps a WebRTC VAD segmenter; speech started/stopped and
 * committed become session events on rt.evt.<sessionId>, and each utterance becomes a
 * transcribe command on rt.cmd.<sessionId> (payload: 16 kHz PCM16LE).
 *
 * Scale-out: replicas share the partitions through a lease table in KV
 * (partition-assignment.ts); a partition is consumed by one replica at a time and
 * moves when replicas join, leave or die.
 *
 * Delivery: a message is acked after its events are published (at-least-once; events
 * carry deterministic msgIDs and item ids derive from the audio timeline, so a
 * redelivery inside the dedup window is stored once). Segmenter state lives in memory;
 * each session's settings (turn detection, language, prompt, key, utterance limit)
 * are kept in KV (`vad.session.<sessionId>`), so a replica that takes a partition over
 * mid-session restores them and realigns on the audio's sample offset header. Speech
 * open at the handover is detected again by the new owner (a new item; the old one is
 * never committed).
 *
 * Streaming (options.decoders set): at speech_started the session's utterance gets a
 * decoder from the local pool if one is free, fed the prefix padding and then the audio
 * as it is read; partials (stable-word deltas, opt-in interims) every
 * partial_interval_ms of new speech; at commit the VAD appends the last delta and
 * `completed` itself (the transcriber's msg ids) instead of publishing the transcribe
 * command. No decoder, or one lost mid-utterance → the command, as without streaming.
 */
export interface SessionState {
  /** What the session decider knows (settings, item ids). */
  decider: DeciderState;
  seg: VadSegmenter;
  partition: number;
  settingsSavedAt: number;
  lastSeen: number;
  /** Recent audio (streaming only), for the prefix padding before speech_started. */
  ring: AudioRing | null;
  stream: OpenStream | null;
  /** CMN estimate the session's last streamed utterance ended with. */
  cmn: number[] | null;
}

const STALE_SESSION_MS = 10 * 60_000;
/** The `leases` bucket keeps entries 10 min: settings of longer sessions are re-saved. */
const RESAVE_SETTINGS_MS = 4 * 60_000;
const ACK_EVERY = 64;
const ACK_INTERVAL_MS = 200;

const settingsKey = (sessionId: string) => `vad.session.${sessionId}`;

/**
 * The partition's durable, ready for a new owner: cumulative acks (AckPolicy.All) suit
 * one in-order reader and cut the ack traffic 64-fold. If a previous owner left
 * messages delivered but unacked (it died, or its pull still had messages in flight
 * when it stopped), the durable is recreated to start right after its ack floor: those
 * messages come again first and in order, rather than after the ack wait and behind
 * newer audio (where a cumulative ack of the newer audio would drop them).
 */
export async function openPartitionConsumer(nats: Nats, stream: string, durable: string, filterSubject: string) {
  const config = {
    durable_name: durable,
    ack_policy: AckPolicy.All,
    ack_wait: 30_000 * 1_000_000,
    max_deliver: 5,
    max_ack_pending: 20_000,
    deliver_policy: DeliverPolicy.New,
    filter_subject: filterSubject,
  };
  const existing = await nats.jsm.consumers.info(stream, durable).catch((err) => {
    if (isNotFound(err)) return null;
    throw err;
  });
  if (!existing) return void (await nats.jsm.consumers.add(stream, config));
  if (existing.config.ack_policy !== AckPolicy.All) {
    // ack policy cannot be changed in place; VAD state is transient, so start at new audio
    await nats.jsm.consumers.delete(stream, durable);
    return void (await nats.jsm.consumers.add(stream, config));
  }
  if (existing.num_ack_pending > 0) {
    const floor = existing.ack_floor.stream_seq;
    await nats.jsm.consumers.delete(stream, durable);
    // nats-server 2.9 reports an ack floor of 0 until the first ack: then replay from the
    // durable's creation (it was created with deliver-new)
    const from = floor > 0 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: floor + 1 } : { deliver_policy: DeliverPolicy.StartTime, opt_start_time: existing.created };
    return void (await nats.jsm.consumers.add(stream, { ...config, ...from }));
  }
  const { deliver_policy: _fixed, ...updatable } = config;
  await nats.jsm.consumers.update(stream, durable, updatable);
}

/**
 * A partition's pull is bounded in messages, sized so the bytes stay bounded too.
 * nats-server closes a connection whose unsent data passes its max_pending (64 MiB) as
 * a slow consumer; a gateway's audio batch at 600 sessions is about 200 KB, so 512
 * messages a pull (as before) let four partitions' pulls queue far past that, the VAD's
 * connection was closed, and its partitions waited out the ack wait for redelivery
 * (decisions 11–30 s late). A pull bounded in bytes instead (`max_bytes`) ends with a
 * 409 whenever the next batch does not fit, and nats.js (3.x) then waits for two missed
 * heartbeats (30 s) before it pulls again if nothing else is buffered: at 1,000 sessions
 * that was some partitions' decisions 30 s late. Gateways cut batches at
 * MAX_BATCH_MESSAGE_BYTES, so the partitions of one process together stay under 32 MiB.
 */
export function pullMessagesPerPartition(partitions: number): number {
  return Math.max(4, Math.floor((32 * 1024 * 1024) / Math.max(1, partitions) / (MAX_BATCH_MESSAGE_BYTES + 4096)));
}

export interface VadServiceOptions {
  nats: Nats;
  logger: Logger;
  partitions: number;
  defaults?: TurnDetection;
  /** Messages a partition's pull may have outstanding (default: pullMessagesPerPartition). */
  pullMessages?: number;
  /** This replica's id in the partition assignment (default: random per process). */
  memberId?: string;
  /** Partition lease expiry (config RT_VAD_LEASE_TTL_MS); renewed every third of it. */
  leaseTtlMs: number;
  /** Streaming decoders (null/absent: every utterance takes the commit → transcribe path). */
  decoders?: StreamDecoderPool | null;
}

export interface RunningVad {
  stop(): Promise<void>;
  sessions(): number;
  /** Partitions this replica consumes now. */
  partitions(): number[];
}

export async function startVadConsumers(options: VadServiceOptions): Promise<RunningVad> {
  const { nats, logger } = options;
  const top = nats.topology;
  const engine = await loadVadEngine();
  const kv = await nats.kv("leases");
  const sessions = new Map<string, SessionState>();
  const loops = new Map<number, { stop(how: "handover" | "lost"): Promise<void> }>();
  const defaults = options.defaults ?? defaultTurnDetection;
  const memberId = options.memberId ?? `vad_${hostname()}_${randomBytes(4).toString("hex")}`;
  const env: HandleEnv = { engine, sessions, defaults, nats, kv, pool: options.decoders ?? null, log: logger };

  const consumePartition = async (p: number) => {
    const durable = `vad_p${p}`;
    await openPartitionConsumer(nats, top.streams.rtAudio.name, durable, top.subjects.rtAudioPartition(p));
    const consumer = await nats.js.consumers.get(top.streams.rtAudio.name, durable);
    const messages = await consumer.consume({ max_messages: options.pullMessages ?? pullMessagesPerPartition(options.partitions) });
    const log = logger.child({ partition: p });
    // Messages are handled in order, one at a time; the publishes each one causes are
    // pipelined (awaiting them one by one would cap a partition at a few dozen events
    // per second). `stored` resolves once everything published so far is stored, and
    // acks are cumulative (AckPolicy.All): every ACK_EVERY messages or ACK_INTERVAL_MS
    // the newest handled message is acked after `stored`, acknowledging all before it.
    let stored: Promise<unknown> = Promise.resolve();
    let newest: JsMsg | null = null;
    let unacked = 0;
    let acking = true;
    const ackNewest = async () => {
      const m = newest;
      if (!m || !acking) return;
      newest = null;
      unacked = 0;
      await stored;
      await m.ackAck().catch(() => false);
    };
    const ackTimer = setInterval(() => void ackNewest(), ACK_INTERVAL_MS);
    const done = (async () => {
      for await (const msg of messages) {
        if (!acking) continue; // lost to another replica: what is buffered is theirs now
        const publishes: Promise<unknown>[] = [];
        try {
          for (const { meta, data } of readMessage(msg)) {
            try {
              // a session this replica has not seen start: restore its settings (takeover)
              if (!sessions.has(meta.sessionId) && meta.control?.kind !== "start") await restoreSession(env, meta.sessionId, p);
              handle(meta, data, p, env, log, publishes);
            } catch (err) {
              log.warn("vad entry failed", { subject: msg.subject, sessionId: meta.sessionId, error: (err as Error).message });
            }
          }
        } catch (err) {
          log.warn("vad message failed", { subject: msg.subject, error: (err as Error).message });
        }
        if (publishes.length) {
          // A failed publish loses those events (the local stream is down); redelivering
          // the audio would not bring them back, so the failure is logged, not retried.
          const settled = Promise.all(publishes).catch((err) => log.warn("vad events not stored", { subject: msg.subject, error: (err as Error).message }));
          stored = Promise.all([stored, settled]);
        }
        // what the message's entries left behind are copies (segmenter, ring, utterances)
        releaseMessageData(msg.data);
        newest = msg;
        if (++unacked >= ACK_EVERY) void ackNewest();
      }
    })();
    loops.set(p, {
      stop: async (how) => {
        if (how === "lost") acking = false;
        // the iterator hands out what it has buffered before it ends: handle all, ack the last
        await messages.close();
        await done.catch(() => undefined);
        clearInterval(ackTimer);
        await ackNewest();
      },
    });
  };

  const stopPartition = async (p: number, how: "handover" | "lost") => {
    const loop = loops.get(p);
    loops.delete(p);
    await loop?.stop(how);
    for (const [id, s] of sessions) {
      if (s.partition !== p) continue;
      dropStream(s);
      s.seg.close();
      sessions.delete(id);
    }
  };

  const assignment = await joinPartitionAssignment(kv, {
    memberId,
    partitions: options.partitions,
    ttlMs: options.leaseTtlMs,
    logger: logger.child({ memberId }),
    start: consumePartition,
    stop: stopPartition,
  });

  const sweep = setInterval(() => {
    const now = Date.now();
    for (const [id, s] of sessions) {
      if (now - s.lastSeen > STALE_SESSION_MS) {
        dropStream(s);
        s.seg.close();
        sessions.delete(id);
      } else if (now - s.settingsSavedAt > RESAVE_SETTINGS_MS) {
        void saveSettings(env, id, s, s.decider.settings).catch(() => undefined);
      }
    }
  }, 60_000);
  sweep.unref();

  return {
    sessions: () => sessions.size,
    partitions: () => assignment.owned(),
    async stop() {
      clearInterval(sweep);
      await assignment.stop();
      for (const s of sessions.values()) {
        dropStream(s);
        s.seg.close();
      }
      sessions.clear();
    },
  };
}

export interface HandleEnv {
  engine: VadEngine;
  sessions: Map<string, SessionState>;
  defaults: TurnDetection;
  nats: Nats;
  kv: KV;
  pool: StreamDecoderPool | null;
  log: Logger;
}

interface MessageMeta {
  sessionId: string;
  /** Parsed control message; null for audio or a control that did not parse. */
  control: AudioControl | null;
  isControl: boolean;
  offset: number;
  /** The message's sequence number in its session (the same when it is delivered again). */
  seq: number;
}

/**
 * The entries of an audio message: a gateway's batch (schemas/audio-batch.ts), or one
 * session's message with its metadata in headers (the earlier format).
 */
function readMessage(msg: JsMsg): { meta: MessageMeta; data: Uint8Array }[] {
  const kind = msg.headers?.get(AUDIO_HEADERS.kind) || "audio";
  if (kind === BATCH_KIND) {
    return decodeAudioBatch(msg.data).map((e) => ({
      meta: { sessionId: e.sessionId, isControl: e.kind === "control", control: e.kind === "control" ? parseControl(e.payload) : null, offset: e.offset, seq: e.seq },
      data: e.payload,
    }));
  }
  const sessionId = msg.headers?.get(AUDIO_HEADERS.session) || msg.subject.split(".").at(-1)!;
  const isControl = kind === "control";
  const offset = Number(msg.headers?.get(AUDIO_HEADERS.offset) ?? "NaN");
  // headers.get answers "" for a missing header: then the stream sequence stands in
  const seq = Number(msg.headers?.get(AUDIO_HEADERS.seq) || msg.seq);
  return [{ meta: { sessionId, control: isControl ? parseControl(msg.data) : null, isControl, offset, seq }, data: msg.data }];
}

/** A control message's JSON; null when it does not parse (reported by handle()). */
function parseControl(bytes: Uint8Array): AudioControl | null {
  try {
    const parsed = audioControl.safeParse(JSON.parse(new TextDecoder().decode(bytes)));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

function saveSettings(env: HandleEnv, sessionId: string, state: SessionState, settings: StartControl): Promise<unknown> {
  state.settingsSavedAt = Date.now();
  return env.kv.put(settingsKey(sessionId), JSON.stringify(settings));
}

async function restoreSession(env: HandleEnv, sessionId: string, partition: number) {
  const entry = await env.kv.get(settingsKey(sessionId)).catch(() => null);
  let settings: StartControl | null = null;
  if (entry && entry.operation === "PUT") {
    const parsed = audioControl.safeParse(entry.json());
    if (parsed.success && parsed.data.kind === "start") settings = parsed.data;
  }
  // never saved (or already ended): the defaults, as before the session's start
  settings ??= { kind: "start", turn_detection: env.defaults, language: null, prompt: null, model: null, max_concurrent_utterances: 2, key_id: "unknown" };
  const state = newState(env, initialState(settings), partition);
  state.settingsSavedAt = Date.now();
  env.sessions.set(sessionId, state);
}

/**
 * One entry of a partition: controls and audio become decider inputs (audio through the
 * session's segmenter first), and the decision's effects are carried out in order.
 */
function handle(meta: MessageMeta, bytes: Uint8Array, partition: number, env: HandleEnv, log: Logger, out: Promise<unknown>[]) {
  const { sessionId, control: c, offset } = meta;
  const state = env.sessions.get(sessionId);
  if (meta.isControl) {
    if (!c) {
      log.warn("bad control message", { sessionId });
      return;
    }
    if (c.kind === "start") {
      const d = decide({ kind: "start", settings: c }, state?.decider ?? null, decideContext(sessionId));
      const fresh = newState(env, d.state!, partition);
      if (state) {
        // a restart: the old segmenter goes, its open stream is the one the decision drops
        state.seg.close();
        fresh.stream = state.stream;
      }
      env.sessions.set(sessionId, fresh);
      apply(env, sessionId, fresh, d.effects, out);
      return;
    }
    if (!state) return; // restored before handle(); gone only after `end`
    state.lastSeen = Date.now();
    switch (c.kind) {
      case "update":
        state.seg.update(c.turn_detection);
        return step(env, sessionId, state, { kind: "update", update: c }, out);
      case "commit":
        return step(env, sessionId, state, { kind: "commit", vad: state.seg.commit("commit"), seq: meta.seq, clientEventId: c.event_id }, out);
      case "clear":
        state.seg.clear();
        return step(env, sessionId, state, { kind: "clear", seq: meta.seq }, out);
      case "end":
        return step(env, sessionId, state, { kind: "end", flush: c.flush, vad: c.flush ? state.seg.commit("close") : [] }, out);
      default: {
        const never: never = c;
        return never;
      }
    }
  }
  if (!state) return;
  state.lastSeen = Date.now();
  const pcm = samplesOf(bytes);
  const at = Number.isFinite(offset) ? offset : undefined;
  if (!state.ring) {
    const vad = state.seg.push(pcm, at);
    if (vad.length) step(env, sessionId, state, { kind: "audio", vad }, out);
    return;
  }
  // Streaming: VAD frame by VAD frame, so a decoder is fed exactly from speech_started
  // on and its utterance ends within one frame of the VAD's end point.
  for (let i = 0; i < pcm.length; i += FRAME_SAMPLES) {
    const chunk = pcm.subarray(i, i + FRAME_SAMPLES);
    const chunkAt = at === undefined ? undefined : at + i;
    state.ring.append(chunk, chunkAt ?? state.seg.position);
    const vad = state.seg.push(chunk, chunkAt);
    if (vad.length) step(env, sessionId, state, { kind: "audio", vad }, out);
    feedStream(env, sessionId, state);
  }
}

/**
 * The PCM16 samples of an audio entry, valid until the next call: a view of the message
 * when it is aligned, else a copy in one reused buffer. What is kept of them, the
 * segmenter and the streaming ring copy (a new array per entry was 7,500 ArrayBuffers a
 * second at 300 sessions).
 */
let scratch = new Int16Array(8192);
function samplesOf(bytes: Uint8Array): Int16Array {
  const n = bytes.byteLength >> 1;
  if (bytes.byteOffset % 2 === 0) return new Int16Array(bytes.buffer, bytes.byteOffset, n);
  if (scratch.length < n) scratch = new Int16Array(Math.ceil(n * 1.25));
  new Uint8Array(scratch.buffer, 0, n * 2).set(bytes.subarray(0, n * 2));
  return scratch.subarray(0, n);
}

const decideContext = (sessionId: string): DecideContext => ({ sessionId, now: Date.now(), newId: () => `evt_${randomUUID()}` });

function step(env: HandleEnv, sessionId: string, state: SessionState, input: DeciderInput, out: Promise<unknown>[]) {
  const d = decide(input, state.decider, decideContext(sessionId));
  apply(env, sessionId, state, d.effects, out);
  if (d.state) state.decider = d.state;
  else {
    state.seg.close();
    env.sessions.delete(sessionId);
  }
}

/**
 * Carries out a decision in order. Events go through the event store, pipelined: each
 * run of events is sent without waiting (one connection keeps them ordered on the wire
 * and in the stream), and `out` collects what the partition's ack waits for.
 */
function apply(env: HandleEnv, sessionId: string, state: SessionState, effects: Effect[], out: Promise<unknown>[]) {
  let events: NewEvent<RtEvent>[] = [];
  const flush = () => {
    if (!events.length) return;
    out.push(appendEvents(env.nats.js, rtEventEnvelope, env.nats.topology.subjects.rtEvent(sessionId), events, { timeoutMs: 10_000 }));
    events = [];
  };
  for (const f of effects) {
    switch (f.kind) {
      case "event":
        events.push({ type: f.event.type, data: f.event.data, msgId: f.id, metadata: { correlationId: sessionId } });
        break;
      case "utterance": {
        // one trace per utterance: committed, the transcribe command (or the streamed
        // decoder's end), the transcriber, the worker and the transcript continue it
        const span = tracer.startSpan("vad utterance", { root: true, attributes: { "session.id": sessionId, "item.id": f.command.item_id, "utterance.reason": f.reason } });
        context.with(trace.setSpan(context.active(), span), () => {
          flush(); // committed is sent before the command, so the client sees it before any transcript
          const sent = transcribe(env, state, f.command, f.pcm);
          // the utterance's buffer goes back to the segmenters once its publish is stored
          // (a failed one is left to the collector: a reconnect may still send it)
          sent.then(() => f.release?.(), () => undefined);
          out.push(sent.finally(() => span.end()));
        });
        break;
      }
      case "open_stream":
        openStream(env, state, f.item, f.startSample);
        break;
      case "drop_stream":
        dropStream(state);
        break;
      case "settings":
        out.push(f.settings ? saveSettings(env, sessionId, state, f.settings) : env.kv.delete(settingsKey(sessionId)));
        break;
      default: {
        const never: never = f;
        return never;
      }
    }
  }
  flush();
}

const FRAME_SAMPLES = 480;
/** Enough for the longest prefix padding (2 s) plus the VAD's 300 ms start window. */
const RING_SAMPLES = 3 * VAD_SAMPLE_RATE;

function newState(env: HandleEnv, decider: DeciderState, partition: number): SessionState {
  return {
    decider,
    ring: env.pool ? new AudioRing(RING_SAMPLES) : null,
    stream: null,
    cmn: null,
    seg: env.engine.createSegmenter(decider.settings.turn_detection),
    partition,
    settingsSavedAt: 0,
    lastSeen: Date.now(),
  };
}
