/**
 * Pure pieces of streaming recognition (used by vad-consumer.ts):
 *
 * - LocalAgreement-2 (whisper_streaming's HypothesisBuffer): a word becomes stable once
 *   two consecutive running hypotheses agree on it as part of their common prefix after
 *   the words already emitted, and it ended at least SETTLE_FRAMES before the decoded
 *   audio does (the first pass keeps revising its last words: agreement alone lets
 *   "until disclosed" out where the final says "until this blows"). Stable words go out
 *   as append-only `delta`s.
 * - The final transcript at commit: the emitted prefix stands (a client may already show
 *   it); it is aligned to the decoder's final words and the final's words after that
 *   alignment are the last delta.
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
  /** The word as the formatted transcript shows it (smart format); absent when off. */
  punctuated_word?: string;
}

/** An emitted word: as recognised, and as the delta showed it. */
export interface EmittedWord {
  word: string;
  form: string;
}

/**
 * How stable words read in a delta, mid-utterance (smart format on): casing only, the
 * item's first word capitalised, "i" and its contractions, and single-word `terms` in
 * their given casing. Numerals and punctuation wait for the final: a number may still
 * grow ("twenty" → "twenty five") and a sentence may not have ended.
 */
export function deltaForms(emittedCount: number, words: readonly string[], terms: ReadonlyMap<string, string>): string[] {
  return words.map((w, i) => {
    const term = terms.get(w.toLowerCase());
    let form = term ?? (/^i('(m|ll|ve|d))?$/.test(w) ? `I${w.slice(1)}` : w);
    if (emittedCount + i === 0) form = form.charAt(0).toUpperCase() + form.slice(1);
    return form;
  });
}

/** Single-word terms by lower case, for deltaForms. */
export function singleWordTerms(terms: readonly string[]): Map<string, string> {
  return new Map(terms.filter((t) => !/\s/.test(t)).map((t) => [t.toLowerCase(), t]));
}

/**
 * The completed item from the emitted words and the decoder's final words. The emitted
 * words stand as the deltas showed them (a client may show them); they are aligned to the
 * final's words by edit distance (the final may have split, merged or revised words the
 * emitted prefix holds), take their timings from the final words they align with (an
 * emitted word the final has nothing for sits at the previous word's end, or
 * `timelineStart`), and the final's words after the aligned prefix follow.
 *
 * `format` (smart format on) gives the formatted form of each final word: the words
 * after the prefix take theirs (a word merged into an emitted one, form "", falls back to
 * itself), and the sentence's closing mark comes last even when every word was emitted
 * already. Returns the last delta too — text appended to the emitted forms, so the
 * concatenated deltas equal `transcript`.
 */
export function composeFinal(
  emitted: readonly EmittedWord[],
  final: readonly TimedWord[],
  timelineStart = 0,
  format?: (words: readonly TimedWord[]) => string[],
): { transcript: string; lastDelta: string; words: TimedWord[] } {
  const { end, pairs } = alignPrefix(
    emitted.map((e) => e.word),
    final.map((w) => w.word),
  );
  const forms = format ? format(final) : final.map((w) => w.word);
  let lastEnd = final[0]?.start_ms ?? timelineStart;
  const words: TimedWord[] = emitted.map((e, i) => {
    const f = pairs[i] === undefined ? undefined : final[pairs[i]!];
    if (f) lastEnd = f.end_ms;
    const timed = f ? { ...f, word: e.word } : { word: e.word, start_ms: lastEnd, end_ms: lastEnd, probability: 0 };
    return format ? { ...timed, punctuated_word: e.form } : timed;
  });
  const restForms: string[] = [];
  let leading = true;
  for (let i = end; i < final.length; i++) {
    const form = forms[i] === "" && leading ? final[i]!.word : forms[i]!;
    if (form !== "") leading = false;
    restForms.push(form);
    words.push(format ? { ...final[i]!, punctuated_word: form } : final[i]!);
  }
  const shown = emitted.map((e) => e.form).join(" ");
  const rest = restForms.filter(Boolean).join(" ");
  let lastDelta = rest && shown ? ` ${rest}` : rest;
  // the closing mark the formatter put on the sentence's last word follows, also when
  // every word was out already (or the last ones fell back to themselves)
  const mark = format ? /[.?!]$/.exec(forms.filter(Boolean).at(-1) ?? "")?.[0] : undefined;
  if (mark && shown + lastDelta && !/[.?!]$/.test(shown + lastDelta)) {
    lastDelta += mark;
    const last = words.findLast((x) => (x.punctuated_word ?? x.word) !== "")!;
    last.punctuated_word = `${last.punctuated_word ?? last.word}${mark}`;
  }
  return { transcript: shown + lastDelta, lastDelta, words };
}

/**
 * The cheapest edit-distance alignment of all of `a` against a prefix of `b`: how many
 * words of `b` that prefix holds (`end`; ties go to the longer prefix, so a final word
 * the emitted text dropped is not repeated) and, per word of `a`, the index in `b` it
 * was matched or substituted with (undefined where `a` has a word `b` does not).
 */
export function alignPrefix(a: readonly string[], b: readonly string[]): { end: number; pairs: (number | undefined)[] } {
  const n = a.length;
  const m = b.length;
  const d: number[][] = Array.from({ length: n + 1 }, (_, i) => Array.from({ length: m + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= n; i++)
    for (let j = 1; j <= m; j++) d[i]![j] = Math.min(d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1), d[i - 1]![j]! + 1, d[i]![j - 1]! + 1);
  let end = 0;
  for (let j = 1; j <= m; j++) if (d[n]![j]! <= d[n]![end]!) end = j;
  const pairs: (number | undefined)[] = new Array(n).fill(undefined);
  for (let i = n, j = end; i > 0; ) {
    if (j > 0 && d[i]![j] === d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)) pairs[--i] = --j;
    else if (d[i]![j] === d[i - 1]![j]! + 1) i--;
    else j--;
  }
  return { end, pairs };
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
