import { headers as natsHeaders } from "@nats-io/transport-node";
import type { JetStreamClient } from "@nats-io/jetstream";
import { AUDIO_HEADERS, type AudioControl } from "../../schemas/realtime";
import { BATCH_KIND, encodeAudioBatch, type AudioBatchEntry } from "../../schemas/audio-batch";
import { concatBytes } from "../../shared/bytes";

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
  /** Queues audio; the publisher keeps `pcm` as it is until published (the caller must not reuse it). */
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
}

export interface AudioBatcher {
  session(options: { sessionId: string; partition: number; onFailure(err: unknown): void }): AudioPublisher;
  /** Publishes what every partition has pending. */
  flushAll(): void;
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

type Item = { kind: "audio"; chunks: Uint8Array[]; bytes: number; offset: number } | { kind: "control"; payload: Uint8Array; offset: number };

interface SessionQueue {
  sessionId: string;
  items: Item[];
  seq: number;
  /** Timeline position of the session's next sample. */
  offset: number;
  published: number;
  failed: boolean;
  inFlight: Set<Promise<unknown>>;
  onFailure(err: unknown): void;
}

interface PartitionState {
  dirty: Set<SessionQueue>;
  /** Payload bytes waiting for the next batch: a burst past a batch's size goes at once. */
  bytes: number;
  pending: number;
  overSince: number | null;
  batches: number;
}

/** An audio run is cut at this size so one entry never nears the message limit. */
const MAX_RUN_BYTES = 64 * 1024;

export function createAudioBatcher(options: AudioBatcherOptions): AudioBatcher {
  const now = options.now ?? Date.now;
  const maxBatchBytes = options.maxBatchBytes ?? 256 * 1024;
  const partitions = new Map<number, PartitionState>();
  const stateOf = (p: number) => {
    let s = partitions.get(p);
    if (!s) partitions.set(p, (s = { dirty: new Set(), bytes: 0, pending: 0, overSince: null, batches: 0 }));
    return s;
  };

  const publish = (p: number, part: PartitionState, entries: AudioBatchEntry[], owners: Set<SessionQueue>) => {
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
      .publish(options.subject(p), encodeAudioBatch(entries), { headers: h, msgID: `${options.instanceId}:${p}:${part.batches++}`, timeout: 10_000 })
      .catch(failed)
      .finally(() => {
        part.pending--;
        if (part.pending <= options.maxPendingAcks) part.overSince = null;
        for (const s of owners) s.inFlight.delete(sent);
      });
    for (const s of owners) s.inFlight.add(sent);
  };

  const flushPartition = (p: number) => {
    const part = partitions.get(p);
    if (!part || part.dirty.size === 0) return;
    let entries: AudioBatchEntry[] = [];
    let owners = new Set<SessionQueue>();
    let bytes = 0;
    for (const s of part.dirty) {
      for (const item of s.items) {
        const payload = item.kind === "control" ? item.payload : concatBytes(item.chunks, item.bytes);
        if (bytes + payload.byteLength > maxBatchBytes && entries.length) {
          publish(p, part, entries, owners);
          entries = [];
          owners = new Set();
          bytes = 0;
        }
        entries.push({ sessionId: s.sessionId, kind: item.kind, seq: s.seq++, offset: item.offset, payload });
        owners.add(s);
        bytes += payload.byteLength + 64;
        s.published++;
      }
      s.items = [];
    }
    part.dirty.clear();
    part.bytes = 0;
    if (entries.length) publish(p, part, entries, owners);
  };

  const flushAll = () => {
    for (const p of partitions.keys()) flushPartition(p);
  };
  const timer = setInterval(flushAll, options.intervalMs ?? 40);
  timer.unref();

  return {
    session({ sessionId, partition, onFailure }) {
      const part = stateOf(partition);
      const q: SessionQueue = { sessionId, items: [], seq: 0, offset: 0, published: 0, failed: false, inFlight: new Set(), onFailure };
      return {
        pushAudio(pcm) {
          // runs of at most MAX_RUN_BYTES: a 1 MiB frame must not become one 1 MiB entry
          for (let i = 0; i < pcm.length; ) {
            const last = q.items.at(-1);
            const run = last?.kind === "audio" && last.bytes < MAX_RUN_BYTES ? last : null;
            const take = Math.min(pcm.length - i, ((run ? MAX_RUN_BYTES - run.bytes : MAX_RUN_BYTES) >> 1));
            const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset + i * 2, take * 2);
            if (run) {
              run.chunks.push(bytes);
              run.bytes += bytes.byteLength;
            } else {
              q.items.push({ kind: "audio", chunks: [bytes], bytes: bytes.byteLength, offset: q.offset });
            }
            q.offset += take;
            i += take;
          }
          if (pcm.length === 0) return;
          part.dirty.add(q);
          part.bytes += pcm.byteLength;
          if (part.bytes >= maxBatchBytes) flushPartition(partition);
        },
        control(message) {
          q.items.push({ kind: "control", payload: new TextEncoder().encode(JSON.stringify(message)), offset: q.offset });
          part.dirty.add(q);
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
        async settled() {
          flushPartition(partition);
          while (q.inFlight.size > 0) await Promise.all([...q.inFlight]);
        },
      };
    },
    flushAll,
    async stop() {
      clearInterval(timer);
      flushAll();
    },
  };
}
