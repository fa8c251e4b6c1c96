import { headers as natsHeaders } from "@nats-io/transport-node";
import type { JsMsg } from "@nats-io/jetstream";
import { randomUUID } from "node:crypto";
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
import { loadVadEngine, type VadEngine, type VadEvent, type VadSegmenter } from "../../shared/audio/vad";

/**
 * The server VAD: one durable pull consumer per partition of RT_AUDIO
 * (rt.audio.<partition>.<sessionId>), each handled strictly in order by one loop, so a
 * session's audio and its in-band control messages are seen in the order the gateway
 * sent them. Per session it keeps a WebRTC VAD segmenter; speech started/stopped and
 * committed become session events on rt.evt.<sessionId>, and each utterance becomes a
 * transcribe command on rt.cmd.<sessionId> (payload: 16 kHz PCM16LE).
 *
 * Delivery: a message is acked after its events are published (at-least-once; events
 * carry deterministic msgIDs, so a redelivery inside the dedup window is stored once).
 * Segmenter state lives in memory: if this process restarts mid-session, the session
 * continues with a fresh segmenter realigned on the audio's sample offset header.
 * Scale-out: a partition must be consumed by one process at a time (run one VAD
 * replica, or give each replica its own partitions); partitions spread the CPU.
 */
interface SessionState {
  seg: VadSegmenter;
  turnDetection: TurnDetection;
  language: string | null;
  prompt: string | null;
  model: string | null;
  keyId: string;
  maxConcurrentUtterances: number;
  itemSeq: number;
  currentItem: string | null;
  previousItem: string | null;
  lastSeen: number;
}

const STALE_SESSION_MS = 10 * 60_000;
const ACK_EVERY = 64;
const ACK_INTERVAL_MS = 200;

/**
 * The partition's durable: cumulative acks (AckPolicy.All) suit one in-order reader and
 * cut the ack traffic 64-fold. Ack policy cannot be changed on an existing consumer, so
 * one declared otherwise is replaced (VAD state is transient; it starts at new audio).
 */
async function ensureOrderedPartitionConsumer(nats: Nats, stream: string, durable: string, filterSubject: string) {
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
  if (existing && existing.config.ack_policy !== AckPolicy.All) await nats.jsm.consumers.delete(stream, durable);
  else if (existing) {
    const { deliver_policy: _fixed, ...updatable } = config;
    await nats.jsm.consumers.update(stream, durable, updatable);
    return;
  }
  await nats.jsm.consumers.add(stream, config);
}

export interface VadServiceOptions {
  nats: Nats;
  logger: Logger;
  partitions: number;
  defaults?: TurnDetection;
  /** Pull batch size per partition. */
  batch?: number;
}

export interface RunningVad {
  stop(): Promise<void>;
  sessions(): number;
}

export async function startVadConsumers(options: VadServiceOptions): Promise<RunningVad> {
  const { nats, logger } = options;
  const top = nats.topology;
  const engine = await loadVadEngine();
  const sessions = new Map<string, SessionState>();
  const loops: { stop(): Promise<void> }[] = [];

  for (let p = 0; p < options.partitions; p++) {
    const durable = `vad_p${p}`;
    await ensureOrderedPartitionConsumer(nats, top.streams.rtAudio.name, durable, top.subjects.rtAudioPartition(p));
    const consumer = await nats.js.consumers.get(top.streams.rtAudio.name, durable);
    const messages = await consumer.consume({ max_messages: options.batch ?? 512 });
    const log = logger.child({ partition: p });
    // Messages are handled synchronously, in order; the publishes each one causes are
    // pipelined (awaiting them one by one would cap a partition at a few dozen events
    // per second). `stored` resolves once everything published so far is stored, and
    // acks are cumulative (AckPolicy.All): every ACK_EVERY messages or ACK_INTERVAL_MS
    // the newest handled message is acked after `stored`, acknowledging all before it.
    let stored: Promise<unknown> = Promise.resolve();
    let newest: JsMsg | null = null;
    let unacked = 0;
    const ackNewest = () => {
      const m = newest;
      if (!m) return;
      newest = null;
      unacked = 0;
      void stored.then(() => m.ack());
    };
    const ackTimer = setInterval(ackNewest, ACK_INTERVAL_MS);
    const done = (async () => {
      for await (const msg of messages) {
        const publishes: Promise<unknown>[] = [];
        try {
          handle(msg, engine, sessions, options.defaults ?? defaultTurnDetection, nats, log, publishes);
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
        if (++unacked >= ACK_EVERY) ackNewest();
      }
    })();
    loops.push({
      stop: async () => {
        clearInterval(ackTimer);
        ackNewest();
        await messages.close();
        await done.catch(() => undefined);
      },
    });
  }

  const sweep = setInterval(() => {
    const now = Date.now();
    for (const [id, s] of sessions) {
      if (now - s.lastSeen > STALE_SESSION_MS) {
        s.seg.close();
        sessions.delete(id);
      }
    }
  }, 60_000);
  sweep.unref();

  return {
    sessions: () => sessions.size,
    async stop() {
      clearInterval(sweep);
      for (const l of loops) await l.stop();
      for (const s of sessions.values()) s.seg.close();
      sessions.clear();
    },
  };
}

function handle(msg: JsMsg, engine: VadEngine, sessions: Map<string, SessionState>, defaults: TurnDetection, nats: Nats, log: Logger, out: Promise<unknown>[]) {
  const sessionId = msg.headers?.get(AUDIO_HEADERS.session) ?? msg.subject.split(".").at(-1)!;
  const kind = msg.headers?.get(AUDIO_HEADERS.kind) ?? "audio";
  const offset = Number(msg.headers?.get(AUDIO_HEADERS.offset) ?? "NaN");

  let state = sessions.get(sessionId);
  if (kind === "control") {
    const parsed = audioControl.safeParse(JSON.parse(new TextDecoder().decode(msg.data)));
    if (!parsed.success) {
      log.warn("bad control message", { sessionId });
      return;
    }
    const c: AudioControl = parsed.data;
    if (c.kind === "start") {
      state?.seg.close();
      state = newState(engine, c.turn_detection, { language: c.language, prompt: c.prompt, model: c.model, keyId: c.key_id, max: c.max_concurrent_utterances });
      sessions.set(sessionId, state);
      return;
    }
    state ??= lazyState(engine, sessions, sessionId, defaults);
    state.lastSeen = Date.now();
    switch (c.kind) {
      case "update":
        state.turnDetection = c.turn_detection;
        state.seg.update(c.turn_detection);
        state.language = c.language;
        state.prompt = c.prompt;
        state.model = c.model;
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
        return;
      default: {
        const never: never = c;
        return never;
      }
    }
  }
  state ??= lazyState(engine, sessions, sessionId, defaults);
  state.lastSeen = Date.now();
  const bytes = msg.data;
  const pcm = new Int16Array(bytes.byteLength >> 1);
  new Uint8Array(pcm.buffer).set(bytes.subarray(0, pcm.length * 2));
  const events = state.seg.push(pcm, Number.isFinite(offset) ? offset : undefined);
  if (events.length) emit(nats, sessionId, state, events, out);
}

function newState(engine: VadEngine, td: TurnDetection, o: { language: string | null; prompt: string | null; model: string | null; keyId: string; max: number }): SessionState {
  return {
    seg: engine.createSegmenter(td),
    turnDetection: td,
    language: o.language,
    prompt: o.prompt,
    model: o.model,
    keyId: o.keyId,
    maxConcurrentUtterances: o.max,
    itemSeq: 0,
    currentItem: null,
    previousItem: null,
    lastSeen: Date.now(),
  };
}

/** Audio of a session whose start we never saw (e.g. this consumer restarted): defaults. */
function lazyState(engine: VadEngine, sessions: Map<string, SessionState>, sessionId: string, defaults: TurnDetection): SessionState {
  const s = newState(engine, defaults, { language: null, prompt: null, model: null, keyId: "unknown", max: 2 });
  sessions.set(sessionId, s);
  return s;
}

const itemId = (sessionId: string, n: number) => `item_${sessionId.slice(5, 17)}_${String(n).padStart(4, "0")}`;

function emit(nats: Nats, sessionId: string, state: SessionState, events: VadEvent[], publishes: Promise<unknown>[]) {
  const out: ServerEvent[] = [];
  for (const e of events) {
    switch (e.kind) {
      case "speech_started":
        state.currentItem = itemId(sessionId, state.itemSeq++);
        out.push({ type: "input_audio_buffer.speech_started", event_id: `evt_${randomUUID()}`, item_id: state.currentItem, audio_start_ms: e.audioStartMs });
        break;
      case "speech_stopped":
        out.push({ type: "input_audio_buffer.speech_stopped", event_id: `evt_${randomUUID()}`, item_id: state.currentItem ?? itemId(sessionId, state.itemSeq++), audio_end_ms: e.audioEndMs });
        break;
      case "utterance": {
        const item = state.currentItem ?? itemId(sessionId, state.itemSeq++);
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
          key_id: state.keyId,
          audio_start_ms: e.audioStartMs,
          audio_end_ms: e.audioEndMs,
          language: state.language,
          prompt: state.prompt,
          model: state.model,
          max_concurrent_utterances: state.maxConcurrentUtterances,
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
