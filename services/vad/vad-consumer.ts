import { headers as natsHeaders } from "@nats-io/transport-node";
import { BATCH_KIND, decodeAudioBatch } from "../../schemas/audio-batch";
import type { JsMsg } from "@nats-io/jetstream";
import { randomBytes, randomUUID } from "node:crypto";
import {
  AUDIO_HEADERS,
  audioControl,
  defaultTurnDetection,
  rtEventEnvelope,
  UTTERANCE_HEADER,
  type AudioControl,
  type RtEvent,
  type ServerEvent,
  type TurnDetection,
  type UtteranceCommand,
} from "../../schemas/realtime";
import type { Logger } from "../../shared/logger";
import { AckPolicy, DeliverPolicy } from "@nats-io/jetstream";
import { isNotFound, type Nats } from "../../shared/nats";
import type { KV } from "@nats-io/kv";
import { hostname } from "node:os";
import { joinPartitionAssignment } from "./partition-assignment";
import { loadVadEngine, VAD_SAMPLE_RATE, type VadEngine, type VadEvent, type VadSegmenter } from "../../shared/audio/vad";
import { appendEvents } from "../../shared/event-store";
import { DEFAULT_PARTIAL_INTERVAL_MS } from "../../schemas/realtime";
import type { StreamDecoderPool, StreamHypothesis, StreamUtterance } from "./stream-decoders";
import { AudioRing, composeFinal, deltaForms, deltaText, newlyStable, SETTLE_FRAMES, singleWordTerms, type EmittedWord } from "./streaming";
import { smartFormat, termsFrom } from "../../shared/format/smart-format";

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
interface OpenStream {
  item: string;
  utt: StreamUtterance;
  /** Timeline sample of the utterance's first sample; word times count from it. */
  startSample: number;
  /** Timeline position fed so far. */
  fed: number;
  /** `fed` when the running hypothesis was last read. */
  hypAt: number;
  hypBusy: boolean;
  ended: boolean;
  previous: string[] | null;
  /** Words out in deltas: as recognised and as shown. */
  emitted: EmittedWord[];
  lastInterim: string;
}

interface SessionState {
  seg: VadSegmenter;
  partition: number;
  /** The session's settings as a `start` control (what is saved in KV). */
  settings: StartControl;
  settingsSavedAt: number;
  lastItemMs: number;
  currentItem: string | null;
  previousItem: string | null;
  lastSeen: number;
  /** Recent audio (streaming only), for the prefix padding before speech_started. */
  ring: AudioRing | null;
  stream: OpenStream | null;
  /** CMN estimate the session's last streamed utterance ended with. */
  cmn: number[] | null;
}

type StartControl = Extract<AudioControl, { kind: "start" }>;

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

export interface VadServiceOptions {
  nats: Nats;
  logger: Logger;
  partitions: number;
  defaults?: TurnDetection;
  /** Pull batch size per partition. */
  batch?: number;
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
    const messages = await consumer.consume({ max_messages: options.batch ?? 512 });
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
        void saveSettings(env, id, s).catch(() => undefined);
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

interface HandleEnv {
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

function saveSettings(env: HandleEnv, sessionId: string, state: SessionState): Promise<unknown> {
  state.settingsSavedAt = Date.now();
  return env.kv.put(settingsKey(sessionId), JSON.stringify(state.settings));
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
  const state = newState(env, settings, partition);
  state.settingsSavedAt = Date.now();
  env.sessions.set(sessionId, state);
}

function handle(meta: MessageMeta, bytes: Uint8Array, partition: number, env: HandleEnv, log: Logger, out: Promise<unknown>[]) {
  const { sessionId, control: c, offset } = meta;
  const { nats, sessions } = env;
  let state = sessions.get(sessionId);
  if (meta.isControl) {
    if (!c) {
      log.warn("bad control message", { sessionId });
      return;
    }
    if (c.kind === "start") {
      if (state) dropStream(state);
      state?.seg.close();
      state = newState(env, c, partition);
      sessions.set(sessionId, state);
      out.push(saveSettings(env, sessionId, state));
      return;
    }
    if (!state) return; // restored before handle(); gone only after `end`
    state.lastSeen = Date.now();
    switch (c.kind) {
      case "update":
        state.settings = {
          ...state.settings,
          turn_detection: c.turn_detection,
          language: c.language,
          prompt: c.prompt,
          model: c.model,
          partial_interval_ms: c.partial_interval_ms ?? state.settings.partial_interval_ms,
          interim_results: c.interim_results ?? state.settings.interim_results,
          smart_format: c.smart_format ?? state.settings.smart_format,
        };
        state.seg.update(c.turn_detection);
        out.push(saveSettings(env, sessionId, state));
        return;
      case "commit": {
        const events = state.seg.commit("commit");
        if (events.length === 0) {
          // msg id from the control's place in the session: a redelivered commit answers once
          const e: ServerEvent = {
            type: "error",
            event_id: `evt_${randomUUID()}`,
            error: { type: "invalid_request_error", code: "input_audio_buffer_commit_empty", message: "Nothing to commit: no speech is in progress.", event_id: c.event_id },
          };
          publishRecord(nats, sessionId, out, { type: "rt.server_event", data: e }, `${sessionId}:${e.type}:control-${meta.seq}`);
          return;
        }
        emit(env, sessionId, state, events, out);
        return;
      }
      case "clear":
        dropStream(state);
        state.seg.clear();
        state.currentItem = null;
        publishRecord(nats, sessionId, out, { type: "rt.server_event", data: { type: "input_audio_buffer.cleared", event_id: `evt_${randomUUID()}` } }, `${sessionId}:input_audio_buffer.cleared:control-${meta.seq}`);
        return;
      case "end":
        if (c.flush) {
          emit(env, sessionId, state, state.seg.commit("close"), out);
          publishRecord(nats, sessionId, out, { type: "rt.session.flushed", data: { session_id: sessionId } }, `${sessionId}:flushed`);
        }
        dropStream(state);
        state.seg.close();
        sessions.delete(sessionId);
        out.push(env.kv.delete(settingsKey(sessionId)));
        return;
      default: {
        const never: never = c;
        return never;
      }
    }
  }
  if (!state) return;
  state.lastSeen = Date.now();
  const pcm = new Int16Array(bytes.byteLength >> 1);
  new Uint8Array(pcm.buffer).set(bytes.subarray(0, pcm.length * 2));
  const at = Number.isFinite(offset) ? offset : undefined;
  if (!state.ring) {
    const events = state.seg.push(pcm, at);
    if (events.length) emit(env, sessionId, state, events, out);
    return;
  }
  // Streaming: VAD frame by VAD frame, so a decoder is fed exactly from speech_started
  // on and its utterance ends within one frame of the VAD's end point.
  for (let i = 0; i < pcm.length; i += FRAME_SAMPLES) {
    const chunk = pcm.subarray(i, i + FRAME_SAMPLES);
    const chunkAt = at === undefined ? undefined : at + i;
    state.ring.append(chunk, chunkAt ?? state.seg.position);
    const events = state.seg.push(chunk, chunkAt);
    if (events.length) emit(env, sessionId, state, events, out);
    feedStream(env, sessionId, state);
  }
}

const FRAME_SAMPLES = 480;
/** Enough for the longest prefix padding (2 s) plus the VAD's 300 ms start window. */
const RING_SAMPLES = 3 * VAD_SAMPLE_RATE;
const msToSamples = (ms: number) => Math.round((ms * VAD_SAMPLE_RATE) / 1000);

function newState(env: HandleEnv, settings: StartControl, partition: number): SessionState {
  return {
    ring: env.pool ? new AudioRing(RING_SAMPLES) : null,
    stream: null,
    cmn: null,
    seg: env.engine.createSegmenter(settings.turn_detection),
    partition,
    settings,
    settingsSavedAt: 0,
    lastItemMs: -1,
    currentItem: null,
    previousItem: null,
    lastSeen: Date.now(),
  };
}

/**
 * Item ids come from where the item starts on the session's audio timeline, so a
 * replica that handles the same audio again (redelivery, takeover) names it the same
 * and its events deduplicate; ids of one session never repeat.
 */
function nextItemId(sessionId: string, state: SessionState, audioMs: number): string {
  const ms = Math.max(Math.round(audioMs), state.lastItemMs + 1);
  state.lastItemMs = ms;
  return `item_${sessionId.slice(5, 17)}_${String(ms).padStart(8, "0")}`;
}

function emit(env: HandleEnv, sessionId: string, state: SessionState, events: VadEvent[], publishes: Promise<unknown>[]) {
  const { nats } = env;
  const out: ServerEvent[] = [];
  for (const e of events) {
    switch (e.kind) {
      case "speech_started":
        state.currentItem = nextItemId(sessionId, state, e.audioStartMs);
        openStream(env, state, state.currentItem, msToSamples(e.audioStartMs));
        out.push({ type: "input_audio_buffer.speech_started", event_id: `evt_${randomUUID()}`, item_id: state.currentItem, audio_start_ms: e.audioStartMs });
        break;
      case "speech_stopped":
        out.push({ type: "input_audio_buffer.speech_stopped", event_id: `evt_${randomUUID()}`, item_id: state.currentItem ?? nextItemId(sessionId, state, e.audioEndMs), audio_end_ms: e.audioEndMs });
        break;
      case "utterance": {
        const item = state.currentItem ?? nextItemId(sessionId, state, e.audioStartMs);
        out.push({
          type: "input_audio_buffer.committed",
          event_id: `evt_${randomUUID()}`,
          item_id: item,
          previous_item_id: state.previousItem,
          audio_start_ms: e.audioStartMs,
          audio_end_ms: e.audioEndMs,
          reason: e.reason,
        });
        // events first (so the client sees committed before any transcript), then the command
        publishEvents(nats, sessionId, publishes, out.splice(0));
        const command: UtteranceCommand = {
          session_id: sessionId,
          item_id: item,
          key_id: state.settings.key_id,
          audio_start_ms: e.audioStartMs,
          audio_end_ms: e.audioEndMs,
          language: state.settings.language,
          prompt: state.settings.prompt,
          model: state.settings.model,
          max_concurrent_utterances: state.settings.max_concurrent_utterances,
          ...(state.settings.smart_format === false ? { smart_format: false } : {}),
          decided_at: Date.now(),
        };
        const stream = state.stream;
        state.stream = null;
        if (stream && stream.item === item && !stream.utt.lost) publishes.push(finishStream(env, stream, command, e.pcm));
        else {
          stream?.utt.abort();
          publishes.push(publishUtterance(nats, command, e.pcm));
        }
        state.previousItem = item;
        state.currentItem = null;
        break;
      }
      default: {
        const never: never = e;
        return never;
      }
    }
  }
  if (out.length) publishEvents(nats, sessionId, publishes, out);
}

/**
 * Publishes session events in order without waiting between them: one connection
 * keeps them ordered on the wire and in the stream. Deterministic msgIDs dedup repeats.
 */
function publishEvents(nats: Nats, sessionId: string, out: Promise<unknown>[], events: ServerEvent[]) {
  for (const e of events) {
    const key = "item_id" in e ? e.item_id : "event_id" in e ? e.event_id : randomUUID();
    publishRecord(nats, sessionId, out, { type: "rt.server_event", data: e }, `${sessionId}:${e.type}:${key}`);
  }
}

function publishRecord(nats: Nats, sessionId: string, out: Promise<unknown>[], event: RtEvent, eventId: string) {
  const envelope = rtEventEnvelope.parse({ ...event, metadata: { eventId, occurredAt: new Date().toISOString(), correlationId: sessionId, version: 1 } });
  const h = natsHeaders();
  h.set("Event-Type", envelope.type);
  out.push(nats.js.publish(nats.topology.subjects.rtEvent(sessionId), JSON.stringify(envelope), { msgID: eventId, headers: h, timeout: 10_000 }));
}

async function publishUtterance(nats: Nats, command: UtteranceCommand, pcm: Int16Array) {
  const h = natsHeaders();
  h.set(UTTERANCE_HEADER, JSON.stringify(command));
  await nats.js.publish(nats.topology.subjects.rtCommand(command.session_id), new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength), {
    headers: h,
    msgID: `${command.session_id}:utterance:${command.item_id}`,
    timeout: 10_000,
  });
}

// ---------------------------------------------------------------- streaming recognition

/** A decoder for the new item if the pool has one free; otherwise the item goes the commit path. */
function openStream(env: HandleEnv, state: SessionState, item: string, startSample: number) {
  dropStream(state);
  if (!env.pool || !state.ring) return;
  const utt = env.pool.acquire({ prompt: state.settings.prompt, cmn: state.cmn });
  if (!utt) return;
  state.stream = { item, utt, startSample, fed: startSample, hypAt: startSample, hypBusy: false, ended: false, previous: null, emitted: [], lastInterim: "" };
}

/** Drops the open stream (clear, session end, handover); its item, if committed later, goes the commit path. */
function dropStream(state: SessionState) {
  const s = state.stream;
  if (!s) return;
  state.stream = null;
  s.ended = true;
  s.utt.abort();
}

/** Feeds what the decoder has not had yet; reads the hypothesis every partial_interval_ms of new speech. */
function feedStream(env: HandleEnv, sessionId: string, state: SessionState) {
  const s = state.stream;
  if (!s || !state.ring || s.utt.lost) return;
  if (state.ring.end > s.fed) {
    s.utt.feed(state.ring.slice(s.fed));
    s.fed = state.ring.end;
  }
  const every = msToSamples(state.settings.partial_interval_ms ?? DEFAULT_PARTIAL_INTERVAL_MS);
  if (s.hypBusy || s.fed - s.hypAt < every) return;
  s.hypAt = s.fed;
  s.hypBusy = true;
  s.utt
    .hypothesis()
    .then((hyp) => onHypothesis(env, sessionId, state, s, hyp))
    .catch(() => undefined) // a lost decoder: the commit takes the fallback
    .finally(() => (s.hypBusy = false));
}

/** LocalAgreement-2: words two hypotheses in a row agree on go out as a delta; the whole hypothesis as an opt-in interim. */
function onHypothesis(env: HandleEnv, sessionId: string, state: SessionState, s: OpenStream, hyp: StreamHypothesis) {
  if (s.ended) return; // committed meanwhile: the final has the last word
  const words = hyp.words.map((w) => w.word);
  const fresh = newlyStable(s.previous, hyp.words, s.emitted.length, hyp.frames - SETTLE_FRAMES);
  s.previous = words;
  const base = { item_id: s.item, content_index: 0 as const };
  const events: { e: ServerEvent; id: string }[] = [];
  if (fresh.length) {
    const forms = state.settings.smart_format === false ? fresh : deltaForms(s.emitted.length, fresh, singleWordTerms(termsFrom(undefined, state.settings.prompt)));
    const e: ServerEvent = { type: "conversation.item.input_audio_transcription.delta", event_id: `evt_${randomUUID()}`, ...base, delta: deltaText(s.emitted.length, forms) };
    events.push({ e, id: `${sessionId}:${e.type}:${s.item}:${s.emitted.length}` });
    s.emitted.push(...fresh.map((word, i) => ({ word, form: forms[i]! })));
  }
  const interim = words.join(" ");
  if (state.settings.interim_results && interim !== s.lastInterim) {
    s.lastInterim = interim;
    const e: ServerEvent = { type: "conversation.item.input_audio_transcription.interim", event_id: `evt_${randomUUID()}`, ...base, transcript: interim };
    events.push({ e, id: `${sessionId}:${e.type}:${s.item}:${s.fed}` });
  }
  const sink: Promise<unknown>[] = [];
  for (const { e, id } of events) publishRecord(env.nats, sessionId, sink, { type: "rt.server_event", data: e }, id);
  void Promise.all(sink).catch((err) => env.log.warn("partial not stored", { sessionId, error: (err as Error).message }));
}

/**
 * Ends the streamed utterance and appends its last delta and `completed` with the
 * transcriber's msg ids (so if both paths ever run for an item the stream keeps one).
 * A decoder lost before or during the end → the transcribe command with the whole audio.
 */
async function finishStream(env: HandleEnv, s: OpenStream, command: UtteranceCommand, pcm: Int16Array): Promise<void> {
  s.ended = true;
  const { session_id: sessionId, item_id: item, audio_start_ms: startMs, audio_end_ms: endMs } = command;
  const startSample = msToSamples(startMs);
  const endSample = startSample + pcm.length;
  if (s.fed < endSample) s.utt.feed(pcm.subarray(Math.max(0, s.fed - startSample)));
  const t0 = performance.now();
  let result;
  try {
    result = await s.utt.end();
  } catch (err) {
    env.log.warn("stream decoder lost; transcribing the committed audio whole", { sessionId, itemId: item, error: (err as Error).message });
    return publishUtterance(env.nats, command, pcm);
  }
  const workerMs = Math.round(performance.now() - t0);
  const state = env.sessions.get(sessionId);
  if (state) state.cmn = result.cmn;
  const clamp = (ms: number) => Math.min(Math.max(ms, startMs), endMs);
  const timed = result.words.map((w) => ({ word: w.word, start_ms: clamp(startMs + Math.round(w.start * 1000)), end_ms: clamp(startMs + Math.round(w.end * 1000)), probability: w.probability }));
  const smart = command.smart_format !== false;
  const terms = smart ? termsFrom(undefined, command.prompt) : [];
  const final = composeFinal(s.emitted, timed, startMs, smart ? (ws) => smartFormat(ws, { terms }).words.map((w) => w.punctuated_word) : undefined);
  const base = { item_id: item, content_index: 0 as const };
  const events: ServerEvent[] = [
    { type: "conversation.item.input_audio_transcription.delta", event_id: `evt_${randomUUID()}`, ...base, delta: final.lastDelta },
    {
      type: "conversation.item.input_audio_transcription.completed",
      event_id: `evt_${randomUUID()}`,
      ...base,
      transcript: final.transcript,
      language: "en",
      audio_start_ms: startMs,
      audio_end_ms: endMs,
      words: final.words,
      worker_id: `stream:${hostname()}`,
      fallback_used: false,
      worker_ms: workerMs,
      queue_ms: 0,
    },
  ];
  await appendEvents(
    env.nats.js,
    rtEventEnvelope,
    env.nats.topology.subjects.rtEvent(sessionId),
    events.map((e) => ({ type: "rt.server_event" as const, data: e, msgId: `${sessionId}:${e.type}:${item}`, metadata: { correlationId: sessionId } })),
  );
}
