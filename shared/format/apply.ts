import type { VerboseTranscription } from "../../schemas/transcription";
import { smartFormat, smartFormatText, termsFrom, type FormatOptions } from "./smart-format";

/**
 * The smart-format stage applied to an engine's verbose_json (issue 16; docs/segment.md
 * "Formatting"): each segment is formatted from its own words (their pauses end
 * sentences; the segment's end ends one, as an utterance or chunk end does), every word
 * gains `punctuated_word`, and `text` is the formatted segments joined. A segment
 * without words is formatted from its text. Word tokens and timings are kept as
 * recognised, so word error rate is computed on the same words as before.
 */
export function formatTranscription(result: VerboseTranscription, options: FormatOptions = {}): VerboseTranscription {
  const words = result.words.map((w) => ({ ...w }));
  const taken = new Set<number>();
  const formatRun = (indices: number[]) => {
    const f = smartFormat(
      indices.map((i) => ({ word: words[i]!.word, start_ms: Math.round(words[i]!.start * 1000), end_ms: Math.round(words[i]!.end * 1000) })),
      options,
    );
    indices.forEach((i, k) => (words[i]!.punctuated_word = f.words[k]!.punctuated_word));
    return f.text;
  };
  const segments = result.segments.map((s) => {
    const mine: number[] = [];
    words.forEach((w, i) => {
      if (!taken.has(i) && w.start >= s.start - 0.01 && w.start < s.end + 0.01) mine.push(i);
    });
    if (mine.length === 0) return { ...s, text: smartFormatText(s.text, options) };
    for (const i of mine) taken.add(i);
    return { ...s, text: formatRun(mine) };
  });
  // words no segment claimed (an engine whose segments do not cover its words) get a form too
  const rest = words.map((_, i) => i).filter((i) => !taken.has(i));
  if (rest.length) formatRun(rest);
  const text = segments.length ? segments.map((s) => s.text.trim()).filter(Boolean).join(" ") : smartFormatText(result.text, options);
  return { ...result, text, segments, words };
}

/**
 * An engine's result as users get it: smart-formatted, with the request's terms, unless
 * the request turned formatting off or the engine formats its own text (the router's
 * `formatted`, from the worker's announced `formatsText`). One rule for every plane.
 */
export function asDelivered(
  result: VerboseTranscription,
  options: { enabled: boolean; engineFormatted: boolean; metadata?: unknown; prompt?: string | null },
): VerboseTranscription {
  if (!options.enabled || options.engineFormatted) return result;
  return formatTranscription(result, { terms: termsFrom(options.metadata, options.prompt) });
}
