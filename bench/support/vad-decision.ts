import { VAD_TRAILING_MS } from "../../schemas/realtime";

/** Bytes of 16 kHz mono PCM16 per millisecond: what the benches stream. */
const BYTES_PER_MS = 32;

/**
 * The position (bytes into the session's audio) whose arrival let the VAD decide a
 * `speech_stopped`: the end of speech plus `silence_duration_ms` of silence after it.
 * `audio_end_ms` already carries VAD_TRAILING_MS of that silence, so it comes off.
 * The VAD decision latency the benches report is the event's arrival minus the moment
 * the client sent this byte (`createSendLog().sentAt`).
 */
export function decisionOffset(audioEndMs: number, silenceMs: number): number {
  return (audioEndMs - VAD_TRAILING_MS + silenceMs) * BYTES_PER_MS;
}

/**
 * When each position of a session's audio left the client: (bytes sent so far, time)
 * after each frame, in typed arrays that double when full, so recording a frame
 * allocates nothing (the benches record tens of thousands a second).
 */
export function createSendLog(capacity = 1024) {
  let bytes = new Float64Array(capacity);
  let times = new Float64Array(capacity);
  let n = 0;
  return {
    /** After a frame went out: `sentBytes` in all so far, sent at `t` (performance.now()). */
    record(sentBytes: number, t: number): void {
      if (n === bytes.length) {
        const grownBytes = new Float64Array(n * 2);
        const grownTimes = new Float64Array(n * 2);
        grownBytes.set(bytes);
        grownTimes.set(times);
        bytes = grownBytes;
        times = grownTimes;
      }
      bytes[n] = sentBytes;
      times[n] = t;
      n++;
    },
    /** performance.now() at which the byte at `offset` was sent; undefined if not sent yet. */
    sentAt(offset: number): number | undefined {
      if (n === 0 || bytes[n - 1]! < offset) return undefined;
      let lo = 0;
      let hi = n - 1;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (bytes[mid]! >= offset) hi = mid;
        else lo = mid + 1;
      }
      return times[lo];
    },
  };
}
