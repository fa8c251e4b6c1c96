import { headers as natsHeaders } from "@nats-io/transport-node";
import type { JetStreamClient } from "@nats-io/jetstream";
import { AUDIO_HEADERS, type AudioControl } from "../../schemas/realtime";

/**
 * Publishes one session's audio to JetStream (rt.audio.<partition>.<sessionId>):
 * samples are coalesced into ~100 ms messages (3 200 bytes at 16 kHz), each with the
 * session, a sequence number and its sample offset in headers and `Nats-Msg-Id`
 * `${sessionId}:${seq}` for dedup. Control messages (start, commit, clear, update, end)
 * go on the same subject after any pending audio, so the VAD sees them in order.
 *
 * Publishes are not awaited one by one (that would cap a session at one round trip per
 * 100 ms); the publisher counts acks in flight and reports since when they have been
 * over the bound. The session closes 1013 upstream_backpressure when that lasts longer
 * than its grace (a client may burst a 1 MiB frame = 320 messages; healthy acks drain
 * that in milliseconds, a stalled stream does not). A failed
 * publish (timeout, stream unavailable) is reported once through `onFailure`.
 */
export interface AudioPublisher {
  pushAudio(pcm: Int16Array): void;
  control(message: AudioControl): void;
  /** Publishes any partial coalesced audio now. */
  flush(): void;
  readonly pendingAcks: number;
  /** Milliseconds the acks in flight have been over the bound (0 when under it). */
  overloadedForMs(now: number): number;
  /** Resolves when every publish so far is acknowledged (or failed). */
  settled(): Promise<void>;
  readonly messagesPublished: number;
}

export interface AudioPublisherOptions {
  js: JetStreamClient;
  subject: string;
  sessionId: string;
  maxPendingAcks: number;
  /** Samples per message: 1 600 = 100 ms at 16 kHz. */
  samplesPerMessage?: number;
  now?: () => number;
  onFailure(err: unknown): void;
}

export function createAudioPublisher(options: AudioPublisherOptions): AudioPublisher {
  const per = options.samplesPerMessage ?? 1600;
  const buffer = new Int16Array(per);
  let fill = 0;
  let offset = 0; // timeline position of buffer[0]
  let seq = 0;
  let pending = 0;
  let published = 0;
  let failed = false;
  let overSince: number | null = null;
  const now = options.now ?? Date.now;
  const inFlight = new Set<Promise<unknown>>();

  const send = (kind: string, payload: Uint8Array, at: number) => {
    const h = natsHeaders();
    h.set(AUDIO_HEADERS.kind, kind);
    h.set(AUDIO_HEADERS.session, options.sessionId);
    h.set(AUDIO_HEADERS.seq, String(seq));
    h.set(AUDIO_HEADERS.offset, String(at));
    const msgID = `${options.sessionId}:${seq}`;
    seq++;
    pending++;
    published++;
    if (pending > options.maxPendingAcks && overSince === null) overSince = now();
    const p = options.js
      .publish(options.subject, payload, { headers: h, msgID, timeout: 10_000 })
      .catch((err) => {
        if (!failed) {
          failed = true;
          options.onFailure(err);
        }
      })
      .finally(() => {
        pending--;
        if (pending <= options.maxPendingAcks) overSince = null;
        inFlight.delete(p);
      });
    inFlight.add(p);
  };

  const flushAudio = () => {
    if (fill === 0) return;
    const bytes = new Uint8Array(buffer.buffer, 0, fill * 2).slice();
    send("audio", bytes, offset);
    offset += fill;
    fill = 0;
  };

  return {
    pushAudio(pcm) {
      let i = 0;
      while (i < pcm.length) {
        const take = Math.min(per - fill, pcm.length - i);
        buffer.set(pcm.subarray(i, i + take), fill);
        fill += take;
        i += take;
        if (fill === per) flushAudio();
      }
    },
    control(message) {
      flushAudio();
      send("control", new TextEncoder().encode(JSON.stringify(message)), offset);
    },
    flush: flushAudio,
    get pendingAcks() {
      return pending;
    },
    overloadedForMs(at) {
      return overSince === null ? 0 : Math.max(0, at - overSince) + 1;
    },
    get messagesPublished() {
      return published;
    },
    async settled() {
      while (inFlight.size > 0) await Promise.all([...inFlight]);
    },
  };
}
