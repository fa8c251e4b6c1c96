import { BATCH_KIND, decodeAudioBatch, MAX_BATCH_MESSAGE_BYTES } from "../../schemas/audio-batch";
import type { JsMsg } from "@nats-io/jetstream";
import { randomBytes } from "node:crypto";
import { defaultTurnDetection, type TurnDetection } from "../../schemas/realtime";
import { AUDIO_HEADERS, audioControl, type AudioControl } from "../../schemas/realtime-internal";
import type { SessionStore } from "../../domain/sessions/store";
import type { Logger } from "../../shared/logger";
import { AckPolicy, DeliverPolicy } from "@nats-io/jetstream";
import { isNotFound, type Nats } from "../../shared/nats";
import { releaseMessageData } from "../../shared/nats-parser";
import { availableParallelism, hostname } from "node:os";
import { cpuMeter } from "../../shared/proc-cpu";
import { joinPartitionAssignment } from "./partition-assignment";
import { loadVadEngine } from "../../shared/audio/vad";
import type { StreamDecoderPool } from "./stream-decoders";
import { handleEntry, type MessageMeta } from "./handle-entry";
import { restoreSession, saveSettings, type HandleEnv, type SessionState } from "./session-state";
import { continuousSpeakers, dropStream } from "./stream-items";
import { BACKLOG_EVERY_MS, publishVadLoad } from "../../shared/realtime-backlog";
import { loopDelayWindow } from "../../shared/loop-delay";

/**
 * The server VAD: one durable pull consumer per partition of RT_AUDIO
 * (rt.audio.<partition>.<sessionId>), each handled strictly in order by one loop, so a
 * session's audio and its in-band control messages are seen in the order the gateway
 * sent them. Per session it keeps a WebRTC VAD segmenter (session-state.ts); each entry
 * is handled by handle-entry.ts: speech started/stopped and committed become session
 * events on rt.evt.<sessionId> (through the sessions store), and each utterance becomes
 * a transcribe command on rt.cmd.<sessionId> (payload: 16 kHz PCM16LE).
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

const STALE_SESSION_MS = 10 * 60_000;
/** The `leases` bucket keeps entries 10 min: settings of longer sessions are re-saved. */
const RESAVE_SETTINGS_MS = 4 * 60_000;
const ACK_EVERY = 64;
const ACK_INTERVAL_MS = 200;

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
function pullMessagesPerPartition(partitions: number): number {
  return Math.max(4, Math.floor((32 * 1024 * 1024) / Math.max(1, partitions) / (MAX_BATCH_MESSAGE_BYTES + 4096)));
}

export interface VadServiceOptions {
  nats: Nats;
  /** rt.evt's one writer. */
  sessions: SessionStore;
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
  /** Cores one continuous speaker's streaming decode is assumed to cost until measured (config RT_ENGINE_SPEAKER_CORES). */
  speakerCores?: number;
}

export interface RunningVad {
  stop(): Promise<void>;
  sessions(): number;
  /** Partitions this replica consumes now. */
  partitions(): number[];
}

/** The engine's share of the machine past which its decoders are starved, not finishing transients (costSharers). */
const SATURATED_ENGINE_SHARE = 0.75;

/**
 * Among how many the engine's load is shared to give one continuous speaker's cost.
 * Decoders busy past the speakers are finishing utterances already committed: a
 * transient on a machine with room (a long commit's decode is no speaker, so the load is
 * shared among the busy decoders), a backlog on a machine without (the decoders starved,
 * each getting less CPU than it needs: only the speakers share it). Shared among the busy
 * decoders there, 20 speakers whose decoding needed 2.4 of 2 cores measured 0.059 cores
 * each, and all were admitted.
 */
export function costSharers(load: number, busy: number, speakers: number): number {
  return load >= SATURATED_ENGINE_SHARE ? speakers : Math.max(busy, speakers);
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
  const env: HandleEnv = { engine, sessions, defaults, nats, store: options.sessions, kv, pool: options.decoders ?? null, log: logger, track: new Map(), labelling: { ms: 0 } };

  // The replica's load, for the gateways' admission (domain/sessions/admission.ts): the
  // worst lag behind the audio and the loop delay, per report interval, and what its
  // streaming decoders use of the machine.
  let worstLagMs = 0;
  const loop = loopDelayWindow();
  const engineCpu = cpuMeter();
  const cores = availableParallelism();
  // what one continuous speaker costs, pauses included: a moving average of the
  // decoders' load per speaker (or per busy decoder, if more), from the configured prior
  // until one has been measured
  let perSpeaker = (options.speakerCores ?? 0.15) / cores;
  // the speaker labels' share of the machine (diarize), counted with the engine's: it is
  // per speaker too, so a diarizing plane admits as many fewer speakers as it costs
  let labelledAt = Date.now();
  const labellingLoad = () => {
    const at = Date.now();
    const share = at > labelledAt ? env.labelling.ms / (at - labelledAt) / cores : 0;
    env.labelling.ms = 0;
    labelledAt = at;
    return share;
  };
  const engineLoad = () => {
    if (!options.decoders) return undefined;
    const { busy, size, pids, speakers: held } = options.decoders.stats();
    const speakers = continuousSpeakers(sessions.values(), Date.now());
    // re-decodes through the router: the share of the engines' slots their decodes held
    const load = (options.decoders.engineShare ? options.decoders.engineShare() : engineCpu.take(pids) / cores) + labellingLoad();
    const n = costSharers(load, busy, speakers);
    if (n > 0 && load > 0) perSpeaker = 0.8 * perSpeaker + 0.2 * (load / n);
    return { load, busy, size, per_speaker: perSpeaker, speakers, held };
  };
  const loadTimer = setInterval(() => {
    publishVadLoad(nats, { replica: memberId, lag_ms: Math.max(0, worstLagMs), loop_delay_ms: loop.take(), engine: engineLoad(), at: Date.now() });
    worstLagMs = 0;
  }, BACKLOG_EVERY_MS);
  loadTimer.unref();

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
    env.track.set(p, (more) => {
      stored = Promise.all([stored, more.catch((err) => log.warn("vad events not stored", { error: (err as Error).message }))]);
    });
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
        // how late this audio is read (a redelivery after a takeover is late by design)
        if (!msg.info.redelivered) worstLagMs = Math.max(worstLagMs, Date.now() - msg.info.timestampNanos / 1e6);
        const publishes: Promise<unknown>[] = [];
        try {
          for (const { meta, data } of readMessage(msg)) {
            try {
              // a session this replica has not seen start: restore its settings (takeover)
              if (!sessions.has(meta.sessionId) && meta.control?.kind !== "start") await restoreSession(env, meta.sessionId, p);
              handleEntry(meta, data, p, env, log, publishes);
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
    env.track.delete(p);
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
      clearInterval(loadTimer);
      loop.stop();
      await assignment.stop();
      for (const s of sessions.values()) {
        dropStream(s);
        s.seg.close();
      }
      sessions.clear();
    },
  };
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

/** A control message's JSON; null when it does not parse (reported by handleEntry()). */
function parseControl(bytes: Uint8Array): AudioControl | null {
  try {
    const parsed = audioControl.safeParse(JSON.parse(new TextDecoder().decode(bytes)));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}
