/**
 * Pure pieces of streaming recognition (used by vad-consumer.ts):
 *
 * - LocalAgreement-2 (whisper_streaming's HypothesisBuffer): a word becomes stable once
 *   two consecutive running hypotheses agree on it as part of their common prefix after
 *   the words already emitted. Stable words go out as append-only `delta`s.
 * - The final transcript at commit: the emitted prefix stands (a client may already show
 *   it), the decoder's final words after it are the last delta.
 * - A ring of a session's recent audio on its timeline, so the prefix padding the VAD
 *   puts before speech_started can be fed to the decoder too.
 */

/** Words of a hypothesis as the decoder prints them (lower case, space separated). */
export function splitWords(hyp: string): string[] {
  return hyp.split(/\s+/).filter(Boolean);
}

/**
 * Words that became stable with `current`: the common prefix of the previous and the
 * current hypothesis after the first `emitted` words (those are out already; they are
 * compared by position, as both hypotheses cover the same audio from its start).
 */
export function newlyStable(previous: readonly string[] | null, current: readonly string[], emitted: number): string[] {
  if (!previous) return [];
  const out: string[] = [];
  for (let i = emitted; i < previous.length && i < current.length; i++) {
    if (previous[i] !== current[i]) break;
    out.push(current[i]!);
  }
  return out;
}

/** The text of a delta adding `words` after `emittedCount` words already sent. */
export function deltaText(emittedCount: number, words: readonly string[]): string {
  if (words.length === 0) return "";
  return (emittedCount > 0 ? " " : "") + words.join(" ");
}

export interface TimedWord {
  word: string;
  start_ms: number;
  end_ms: number;
  probability: number;
}

/**
 * The completed item from the emitted prefix and the decoder's final words: the first
 * `emitted.length` words are the emitted ones (with the final's timings at the same
 * position where it has them), the rest are the final's. Returns the last delta too, so
 * concatenated deltas equal `transcript`.
 */
export function composeFinal(emitted: readonly string[], final: readonly TimedWord[]): { transcript: string; lastDelta: string; words: TimedWord[] } {
  const lastEnd = final.at(-1)?.end_ms ?? 0;
  const words: TimedWord[] = emitted.map((word, i) => {
    const f = final[i];
    return f ? { ...f, word } : { word, start_ms: lastEnd, end_ms: lastEnd, probability: 0 };
  });
  const rest = final.slice(emitted.length);
  words.push(...rest);
  return { transcript: words.map((w) => w.word).join(" "), lastDelta: deltaText(emitted.length, rest.map((w) => w.word)), words };
}

/**
 * The last `capacity` samples of a session's audio, addressed by timeline position.
 * Audio before `end` (a redelivery) is skipped; a gap empties the ring.
 */
export class AudioRing {
  private readonly buf: Int16Array;
  /** Timeline position of the sample after the newest one. */
  end = 0;

  constructor(readonly capacity: number) {
    this.buf = new Int16Array(capacity);
  }

  get start(): number {
    return Math.max(this.startAt, this.end - this.capacity);
  }
  private startAt = 0;

  append(pcm: Int16Array, at: number) {
    if (at > this.end) this.startAt = this.end = at; // gap: what came before is not adjacent
    let from = this.end - at;
    if (from >= pcm.length) return;
    for (; from < pcm.length; from++) this.buf[this.end++ % this.capacity] = pcm[from]!;
  }

  /** Samples [from, to) still held (clamped to what the ring has). */
  slice(from: number, to = this.end): Int16Array {
    const a = Math.max(from, this.start);
    const b = Math.min(to, this.end);
    const out = new Int16Array(Math.max(0, b - a));
    for (let i = 0; i < out.length; i++) out[i] = this.buf[(a + i) % this.capacity]!;
    return out;
  }
}
