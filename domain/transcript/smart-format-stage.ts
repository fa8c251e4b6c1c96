import { smartFormat } from "./smart-format";
import type { ShapedWord, TranscriptStage } from "./stage";

/**
 * Smart format as a pipeline stage (docs/segment-reference.md "Formatting", docs/design/realtime.md
 * "Streaming recognition"): a whole run gets punctuation, capitals and numerals with the caller's
 * `terms`; streamed words get casing only (`deltaForms`).
 */
export function smartFormatStage(terms: readonly string[]): TranscriptStage {
  const single = singleWordTerms(terms);
  return {
    name: "smart_format",
    shape(words) {
      const f = smartFormat(
        words.map((w) => ({ word: w.form, start_ms: w.start_ms, end_ms: w.end_ms })),
        { terms },
      );
      return words.map((w, i) => ({ ...w, form: f.words[i]!.punctuated_word }));
    },
    shapeStreamed(words, before) {
      const forms = deltaForms(before, words.map((w) => w.form), single);
      return words.map((w: ShapedWord, i) => ({ ...w, form: forms[i]! }));
    },
  };
}

/**
 * How stable words read in a delta, mid-utterance: casing only, the item's first word
 * capitalised, "i" and its contractions, and single-word `terms` in their given casing.
 * Numerals and punctuation wait for the final: a number may still grow ("twenty" →
 * "twenty five") and a sentence may not have ended.
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
