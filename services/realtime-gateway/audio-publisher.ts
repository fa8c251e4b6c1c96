import { headers as natsHeaders } from "@nats-io/transport-node";
import type { JetStreamClient } from "@nats-io/jetstream";
import { AUDIO_HEADERS, type AudioControl } from "../../schemas/realtime-internal";
import { AudioBatchWriter, BATCH_KIND, entrySize, MAX_BATCH_MESSAGE_BYTES } from "../../schemas/audio-batch";
import { BufferPool } from "../../shared/buffer-pool";

/**
 * A session's audio path to JetStream. Its audio and control messages (start, commit,
 * clear, update, end) queue in order and go out in the gateway's next batch for the
 * session's VAD partition (schemas/audio-batch.ts): every `intervalMs` (40) one message
 * per partition carries what all of the gateway's sessions of that partition sent since
 * the last one, so JetStream sees a few hundred publishes a second however many
 * sessions are open (a message per session every 100 ms was 10,000 a second at 1,000
 * sessions, and the publishes themselves were the plane's main cost).
 *
 * Publishes are not awaited one by one; the batcher counts the batches in flight per
 * partition and reports since when they have been over the bound. A session closes
 * 1013 upstream_backpressure when that lasts longer than its grace (a client may burst
 * a 1 MiB frame; healthy acks drain that in milliseconds, a stalled stream does not). A
 * failed publish (timeout, stream unavailable) is reported once to every session that
 * had entries in it, through `onFailure`.
 */
export interface AudioPublisher {
  /** Queues audio: copied at once into the partition's next batch (the caller may reuse `pcm`). */
  pushAudio(pcm: Int16Array): void;
  control(message: AudioControl): void;
  /** Publishes the session's partition's pending batch now. */
  flush(): void;
  /** Batches in flight on the session's partition. */
  readonly pendingAcks: number;
  /** Milliseconds the partition's batches in flight have been over the bound (0 when under it). */
  overloadedForMs(now: number): number;
  /** Resolves when every entry of this session so far is acknowledged (or failed). */
  settled(): Promise<void>;
  /** Entries (audio runs and controls) this session has had published. */
  readonly messagesPublished: number;
  /** A resumed session: its next audio starts at this timeline sample (the VAD's answer to the resume). */
  resumeAt(offset: number): void;
}

export interface AudioBatcher {
  /** `firstSeq`: a resumed connection's entries are numbered on from a base of their own (resume.ts), so control ids never repeat in the session. */
  session(options: { sessionId: string; partition: number; firstSeq?: number; onFailure(err: unknown): void }): AudioPublisher;
  /** Publishes what every partition has pending. */
  flushAll(): void;
  /** Milliseconds the worst partition's batches in flight have been over the bound (0 when none is). */
  overloadedForMs(now: number): number;
  stop(): Promise<void>;
}

export interface AudioBatcherOptions {
  js: JetStreamClient;
  /** rt.audio.<partition>.<instance> */
  subject(partition: number): string;
  /** Unique per gateway process start: batch msg ids are `${instanceId}:${partition}:${n}`. */
  instanceId: string;
  /** Batches in flight per partition before its sessions count as backpressured. */
  maxPendingAcks: number;
  intervalMs?: number;
  /** A batch is split before it passes this (the stream takes 1 MiB messages). */
  maxBatchBytes?: number;
  now?: () => number;
}

interface SessionQueue {
  sessionId: string;
  seq: number;
  /** Timeline position of the session's next sample. */
  offset: number;
  published: number;
  failed: boolean;
  inFlight: Set<Promise<unknown>>;
  onFailure(err: unknown): void;
}

interface PartitionState {
  /** The batch being written (null until something is queued), and whose entries it holds. */
  writer: AudioBatchWriter | null;
  owners: Set<SessionQueue>;
  /** Size of the last batch: the next one's buffer starts there, so it rarely grows. */
  lastSize: number;
  pending: number;
  overSince: number | null;
  batches: number;
}

/** An audio run is cut at this size so one entry never nears the message limit. */
const MAX_RUN_BYTES = 64 * 1024;
/** Batch buffers kept for reuse, at most. */
const MAX_SPARE_BYTES = 8 * 1024 * 1024;

export function createAudioBatcher(options: AudioBatcherOptions): AudioBatcher {
  const now = options.now ?? Date.now;
  const maxBatchBytes = Math.min(MAX_BATCH_MESSAGE_BYTES, options.maxBatchBytes ?? MAX_BATCH_MESSAGE_BYTES);
  const partitions = new Map<number, PartitionState>();
  const stateOf = (p: number) => {
    let s = partitions.get(p);
    if (!s) partitions.set(p, (s = { writer: null, owners: new Set(), lastSize: 16 * 1024, pending: 0, overSince: null, batches: 0 }));
    return s;
  };
  // Batch buffers are reused once JetStream has acknowledged their batch (then nats.js
  // has written them out and holds no reference): a new buffer per batch was 30 MB a
  // second of fresh pages at 1,000 sessions, and V8 counts them toward its next full
  // collection. A failed batch's buffer is left to the collector (a reconnecting
  // connection may still hold it); so is one a batch outgrew.
  const spare = new BufferPool({ step: 16 * 1024, maxBytes: MAX_SPARE_BYTES, slack: 2 });
  const writerOf = (part: PartitionState) => (part.writer ??= new AudioBatchWriter(new Uint8Array(spare.take(Math.min(maxBatchBytes + MAX_RUN_BYTES, Math.ceil(part.lastSize * 1.25))))));

  const flushPartition = (p: number) => {
    const part = partitions.get(p);
    const writer = part?.writer;
    if (!part || !writer || writer.entries === 0) return;
    const data = writer.finish();
    const buffer = writer.buffer;
    const owners = part.owners;
    part.writer = null;
    part.owners = new Set();
    part.lastSize = data.byteLength;
    const h = natsHeaders();
    h.set(AUDIO_HEADERS.kind, BATCH_KIND);
    part.pending++;
    if (part.pending > options.maxPendingAcks && part.overSince === null) part.overSince = now();
    const failed = (err: unknown) => {
      for (const s of owners) {
        if (s.failed) continue;
        s.failed = true;
        s.onFailure(err);
      }
    };
    const sent = options.js
      .publish(options.subject(p), data, { headers: h, msgID: `${options.instanceId}:${p}:${part.batches++}`, timeout: 10_000 })
      .then(() => spare.give(buffer.buffer), failed)
      .finally(() => {
        part.pending--;
        if (part.pending <= options.maxPendingAcks) part.overSince = null;
        for (const s of owners) s.inFlight.delete(sent);
      });
    for (const s of owners) s.inFlight.add(sent);
  };

  /** The partition's batch with room for `bytes` more: the current one, or a new one after publishing it. */
  const room = (p: number, part: PartitionState, bytes: number) => {
    const w = writerOf(part);
    if (w.entries === 0 || w.size + bytes <= maxBatchBytes) return w;
    flushPartition(p);
    return writerOf(part);
  };

  const flushAll = () => {
    for (const p of partitions.keys()) flushPartition(p);
  };
  const timer = setInterval(flushAll, options.intervalMs ?? 40);
  timer.unref();

  return {
    session({ sessionId, partition, firstSeq = 0, onFailure }) {
      const part = stateOf(partition);
      const q: SessionQueue = { sessionId, seq: firstSeq, offset: 0, published: 0, failed: false, inFlight: new Set(), onFailure };
      return {
        pushAudio(pcm) {
          const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
          // runs of at most MAX_RUN_BYTES: a 1 MiB frame must not become one 1 MiB entry;
          // consecutive audio of the session in a batch is one run, as one entry
          for (let i = 0; i < bytes.length; ) {
            const w = writerOf(part);
            const run = w.runBytes(sessionId);
            let take = Math.min(bytes.length - i, MAX_RUN_BYTES - Math.max(0, run));
            if (run >= 0 && take > 0 && w.size + take <= maxBatchBytes) w.extend(sessionId, bytes.subarray(i, i + take));
            else {
              take = Math.min(bytes.length - i, MAX_RUN_BYTES);
              room(partition, part, entrySize(sessionId, take)).add(sessionId, "audio", q.seq++, q.offset, bytes.subarray(i, i + take));
              q.published++;
            }
            part.owners.add(q);
            q.offset += take >> 1;
            i += take;
          }
          if (part.writer && part.writer.size >= maxBatchBytes) flushPartition(partition);
        },
        control(message) {
          const payload = new TextEncoder().encode(JSON.stringify(message));
          room(partition, part, entrySize(sessionId, payload.byteLength)).add(sessionId, "control", q.seq++, q.offset, payload);
          part.owners.add(q);
          q.published++;
        },
        flush: () => flushPartition(partition),
        get pendingAcks() {
          return part.pending;
        },
        overloadedForMs(at) {
          return part.overSince === null ? 0 : Math.max(0, at - part.overSince) + 1;
        },
        get messagesPublished() {
          return q.published;
        },
        resumeAt(offset) {
          q.offset = offset;
        },
        async settled() {
          flushPartition(partition);
          while (q.inFlight.size > 0) await Promise.all([...q.inFlight]);
        },
      };
    },
    flushAll,
    overloadedForMs(at) {
      let worst = 0;
      for (const part of partitions.values()) if (part.overSince !== null) worst = Math.max(worst, at - part.overSince + 1);
      return worst;
    },
    async stop() {
      clearInterval(timer);
      flushAll();
    },
  };
}
