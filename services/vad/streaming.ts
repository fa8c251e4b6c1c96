/**
 * Pure pieces of streaming recognition (used by vad-consumer.ts and stream-items.ts):
 *
 * - LocalAgreement-2 (whisper_streaming's HypothesisBuffer): a word becomes stable once
 *   two consecutive running hypotheses agree on it as part of their common prefix after
 *   the words already emitted, and it ended at least SETTLE_FRAMES before the decoded
 *   audio does (the first pass keeps revising its last words: agreement alone lets
 *   "until disclosed" out where the final says "until this blows"). Stable words go out
 *   as append-only `delta`s, shaped by the transcript pipeline
 *   (domain/transcript/item-transcript.ts, which also composes the final at commit).
 * - A ring of a session's recent audio on its timeline, so the prefix padding the VAD
 *   puts before speech_started can be fed to the decoder too.
 */

/** How far behind the decoded audio a word must end before it can be emitted: 0.6 s (PocketSphinx frames are 10 ms). */
export const SETTLE_FRAMES = 60;

/**
 * Words that became stable with `current`: the common prefix of the previous and the
 * current hypothesis after the first `emitted` words (those are out already; they are
 * compared by position, as both hypotheses cover the same audio from its start), cut
 * at the first word that ends later than `settledFrame`.
 */
export function newlyStable(
  previous: readonly string[] | null,
  current: readonly { word: string; endFrame: number }[],
  emitted: number,
  settledFrame: number,
): string[] {
  if (!previous) return [];
  const out: string[] = [];
  for (let i = emitted; i < previous.length && i < current.length; i++) {
    const w = current[i]!;
    if (previous[i] !== w.word || w.endFrame > settledFrame) break;
    out.push(w.word);
  }
  return out;
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
