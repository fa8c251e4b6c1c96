import { headers as natsHeaders } from "@nats-io/transport-node";
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
import { loadVadEngine, type VadEngine, type VadEvent, type VadSegmenter } from "../../shared/audio/vad";

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
 */
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
  const env: HandleEnv = { engine, sessions, defaults, nats, kv };

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
          const meta = readMessage(msg);
          // a session this replica has not seen start: restore its settings (takeover)
          if (!sessions.has(meta.sessionId) && meta.control?.kind !== "start") await restoreSession(env, meta.sessionId, p);
          handle(meta, msg, p, env, log, publishes);
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
      for (const s of sessions.values()) s.seg.close();
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
}

interface MessageMeta {
  sessionId: string;
  /** Parsed control message; null for audio or a control that did not parse. */
  control: AudioControl | null;
  isControl: boolean;
  offset: number;
}

function readMessage(msg: JsMsg): MessageMeta {
  const sessionId = msg.headers?.get(AUDIO_HEADERS.session) || msg.subject.split(".").at(-1)!;
  const isControl = (msg.headers?.get(AUDIO_HEADERS.kind) || "audio") === "control";
  const offset = Number(msg.headers?.get(AUDIO_HEADERS.offset) ?? "NaN");
  let control: AudioControl | null = null;
  if (isControl) {
    try {
      const parsed = audioControl.safeParse(JSON.parse(new TextDecoder().decode(msg.data)));
      if (parsed.success) control = parsed.data;
    } catch {
      // reported by handle()
    }
  }
  return { sessionId, control, isControl, offset };
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
  const state = newState(env.engine, settings, partition);
  state.settingsSavedAt = Date.now();
  env.sessions.set(sessionId, state);
}

function handle(meta: MessageMeta, msg: JsMsg, partition: number, env: HandleEnv, log: Logger, out: Promise<unknown>[]) {
  const { sessionId, control: c, offset } = meta;
  const { nats, sessions } = env;
  let state = sessions.get(sessionId);
  if (meta.isControl) {
    if (!c) {
      log.warn("bad control message", { sessionId });
      return;
    }
    if (c.kind === "start") {
      state?.seg.close();
      state = newState(env.engine, c, partition);
      sessions.set(sessionId, state);
      out.push(saveSettings(env, sessionId, state));
      return;
    }
    if (!state) return; // restored before handle(); gone only after `end`
    state.lastSeen = Date.now();
    switch (c.kind) {
      case "update":
        state.settings = { ...state.settings, turn_detection: c.turn_detection, language: c.language, prompt: c.prompt, model: c.model };
        state.seg.update(c.turn_detection);
        out.push(saveSettings(env, sessionId, state));
        return;
      case "commit": {
        const events = state.seg.commit("commit");
        if (events.length === 0) {
          publishEvents(nats, sessionId, out, [
            {
              type: "error",
              event_id: `evt_${randomUUID()}`,
              error: { type: "invalid_request_error", code: "input_audio_buffer_commit_empty", message: "Nothing to commit: no speech is in progress.", event_id: c.event_id },
            },
          ]);
          return;
        }
        emit(nats, sessionId, state, events, out);
        return;
      }
      case "clear":
        state.seg.clear();
        state.currentItem = null;
        publishEvents(nats, sessionId, out, [{ type: "input_audio_buffer.cleared", event_id: `evt_${randomUUID()}` }]);
        return;
      case "end":
        if (c.flush) {
          emit(nats, sessionId, state, state.seg.commit("close"), out);
          publishRecord(nats, sessionId, out, { type: "rt.session.flushed", data: { session_id: sessionId } }, `${sessionId}:flushed`);
        }
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
  const bytes = msg.data;
  const pcm = new Int16Array(bytes.byteLength >> 1);
  new Uint8Array(pcm.buffer).set(bytes.subarray(0, pcm.length * 2));
  const events = state.seg.push(pcm, Number.isFinite(offset) ? offset : undefined);
  if (events.length) emit(nats, sessionId, state, events, out);
}

function newState(engine: VadEngine, settings: StartControl, partition: number): SessionState {
  return {
    seg: engine.createSegmenter(settings.turn_detection),
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

function emit(nats: Nats, sessionId: string, state: SessionState, events: VadEvent[], publishes: Promise<unknown>[]) {
  const out: ServerEvent[] = [];
  for (const e of events) {
    switch (e.kind) {
      case "speech_started":
        state.currentItem = nextItemId(sessionId, state, e.audioStartMs);
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
        publishes.push(publishUtterance(nats, {
          session_id: sessionId,
          item_id: item,
          key_id: state.settings.key_id,
          audio_start_ms: e.audioStartMs,
          audio_end_ms: e.audioEndMs,
          language: state.settings.language,
          prompt: state.settings.prompt,
          model: state.settings.model,
          max_concurrent_utterances: state.settings.max_concurrent_utterances,
          decided_at: Date.now(),
        }, e.pcm));
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
