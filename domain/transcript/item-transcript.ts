import type { VerboseTranscription } from "../../schemas/transcription";
import { shapeRun, shapeTranscription, type TranscriptPipeline } from "./pipeline";
import type { ShapedWord } from "./stage";

/**
 * A realtime item's transcript, on both realtime paths: the `delta`s a client appends
 * and the `completed` transcript they add up to. The one rule, for every stage: a delta
 * never rewrites what was sent before it. Mid-utterance (the streamed path) each stage
 * gives only the forms no later word can change (`TranscriptStage.shapeStreamed`: smart
 * format gives casing); at the final every stage shapes the whole item, the words sent
 * stand as they went out, and the last delta carries the rest (numerals, the closing
 * mark). A committed utterance transcribed whole (the commit path) sent nothing before:
 * its one delta is its whole transcript.
 */

/** A word of a completed item, times in ms on the session's audio timeline. */
export interface TimedWord {
  word: string;
  start_ms: number;
  end_ms: number;
  probability?: number;
  /** The word as the shaped transcript shows it; absent when no stage ran. */
  punctuated_word?: string;
  /** Redacted: the entity, and `word` shows `[entity]`. */
  entity?: string;
}

/** A word sent in a delta: as recognised, and as the delta showed it. */
export interface EmittedWord {
  word: string;
  form: string;
  /** Redacted in the delta: the completed item's word shows `[entity]`. (`word` stays as recognised in memory, to align with the final's words; it is never sent or stored.) */
  entity?: string;
}

/** An item's end: its transcript, the last delta (the deltas sent before it and it add up to `transcript`), its words. */
export interface ItemTranscript {
  transcript: string;
  lastDelta: string;
  words: TimedWord[];
}

/** The text of a delta adding `words` after `emittedCount` words already sent. */
export function deltaText(emittedCount: number, words: readonly string[]): string {
  const shown = words.filter((w) => w !== "");
  if (shown.length === 0) return "";
  return (emittedCount > 0 ? " " : "") + shown.join(" ");
}

/**
 * Words that became stable mid-utterance, as the next delta after the `emitted` words:
 * each stage's streamed forms. Returns the delta's text and the words as they went out
 * (the caller adds them to `emitted`): a prefix of `fresh`, where a stage held the rest
 * back (redaction's open digit run); those are offered again with the next words.
 */
export function streamedDelta(pipeline: TranscriptPipeline, emitted: readonly EmittedWord[], fresh: readonly string[]): { delta: string; words: EmittedWord[] } {
  const sent = emitted.map((e) => e.word);
  const run = pipeline.stages.reduce<ShapedWord[]>(
    (words, stage) => stage.shapeStreamed(words, emitted.length, sent),
    fresh.map((word) => ({ word, form: word })),
  );
  const shown = emitted.filter((e) => e.form !== "").length;
  return {
    delta: deltaText(shown, run.map((w) => w.form)),
    words: run.map((w) => ({ word: w.word, form: w.form, ...(w.entity ? { entity: w.entity } : {}) })),
  };
}

/** A streamed item at its commit: the words sent stand, the decoder's final words give the rest (`composeFinal`). */
export function completeStreamedItem(pipeline: TranscriptPipeline, emitted: readonly EmittedWord[], final: readonly TimedWord[], timelineStart: number): ItemTranscript {
  const format = pipeline.stages.length
    ? (words: readonly TimedWord[]) => shapeRun(pipeline, words.map((w) => ({ word: w.word, start_ms: w.start_ms, end_ms: w.end_ms, form: w.word })))
    : undefined;
  return composeFinal(emitted, final, timelineStart, format);
}

/** A committed utterance transcribed whole: the engine's result shaped, times moved onto the session timeline from `audioStartMs`. */
export function completeCommittedItem(pipeline: TranscriptPipeline, result: VerboseTranscription, audioStartMs: number): ItemTranscript & { language: string } {
  const shaped = shapeTranscription(pipeline, result);
  const text = shaped.text.trim();
  const toMs = (s: number) => audioStartMs + Math.round(s * 1000);
  return {
    transcript: text,
    lastDelta: text,
    language: shaped.language,
    words: shaped.words.map((w) => ({
      word: w.word,
      start_ms: toMs(w.start),
      end_ms: toMs(w.end),
      ...(w.probability === undefined ? {} : { probability: w.probability }),
      ...(w.punctuated_word === undefined ? {} : { punctuated_word: w.punctuated_word }),
      ...(w.entity === undefined ? {} : { entity: w.entity }),
    })),
  };
}

/**
 * A committed item transcribed whole after deltas of its re-decodes went out (services/vad/redecode.ts):
 * the words sent stand and the engine's result gives the rest, as for a streamed item;
 * nothing sent: the commit path's one delta.
 */
export function completeItemAfterDeltas(pipeline: TranscriptPipeline, emitted: readonly EmittedWord[] | undefined, result: VerboseTranscription, audioStartMs: number): ItemTranscript & { language: string } {
  if (!emitted?.length) return completeCommittedItem(pipeline, result, audioStartMs);
  const toMs = (s: number) => audioStartMs + Math.round(s * 1000);
  const final = result.words.map((w) => ({ word: w.word.trim(), start_ms: toMs(w.start), end_ms: toMs(w.end), ...(w.probability === undefined ? {} : { probability: w.probability }) })).filter((w) => w.word !== "");
  return { ...completeStreamedItem(pipeline, emitted, final, audioStartMs), language: result.language };
}

/**
 * The completed item from the emitted words and the decoder's final words. The emitted
 * words stand as the deltas showed them (a client may show them); they are aligned to the
 * final's words by edit distance (the final may have split, merged or revised words the
 * emitted prefix holds), take their timings from the final words they align with (an
 * emitted word the final has nothing for sits at the previous word's end, or
 * `timelineStart`), and the final's words after the aligned prefix follow.
 *
 * `format` (any stage on) gives the shaped form of each final word: the words
 * after the prefix take theirs (a word merged into an emitted one, form "", falls back to
 * itself), and the sentence's closing mark comes last even when every word was emitted
 * already. Returns the last delta too — text appended to the emitted forms, so the
 * concatenated deltas equal `transcript`.
 */
export function composeFinal(
  emitted: readonly EmittedWord[],
  final: readonly TimedWord[],
  timelineStart = 0,
  format?: (words: readonly TimedWord[]) => readonly ShapedWord[],
): ItemTranscript {
  const { end, pairs } = alignPrefix(
    emitted.map((e) => e.word),
    final.map((w) => w.word),
  );
  const shaped = format?.(final);
  const forms = shaped ? shaped.map((w) => w.form) : final.map((w) => w.word);
  const redacted = (w: TimedWord, entity: string | undefined): TimedWord => (entity ? { ...w, word: `[${entity}]`, entity } : w);
  let lastEnd = final[0]?.start_ms ?? timelineStart;
  const words: TimedWord[] = emitted.map((e, i) => {
    const f = pairs[i] === undefined ? undefined : final[pairs[i]!];
    if (f) lastEnd = f.end_ms;
    const timed = redacted(f ? { ...f, word: e.word } : { word: e.word, start_ms: lastEnd, end_ms: lastEnd, probability: 0 }, e.entity);
    return format ? { ...timed, punctuated_word: e.form } : timed;
  });
  const restForms: string[] = [];
  let leading = true;
  for (let i = end; i < final.length; i++) {
    const entity = shaped?.[i]!.entity;
    // a redacted word falls back to its label, never to what was said
    const form = forms[i] === "" && leading ? (entity ? `[${entity}]` : final[i]!.word) : forms[i]!;
    if (form !== "") leading = false;
    restForms.push(form);
    const w = redacted(final[i]!, entity);
    words.push(format ? { ...w, punctuated_word: form } : w);
  }
  const shown = emitted
    .map((e) => e.form)
    .filter(Boolean)
    .join(" ");
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
