import type { RedactEntity } from "../../schemas/redact";
import { findEntities, NO_CUTS, redactRules } from "./redact";
import { termsFrom } from "./terms";

/** A segment of a transcript joined from runs cut out of longer audio: its delivered text, and whether a cut lies before it. */
export interface JoinedSegment {
  text: string;
  cutBefore: boolean;
}

/**
 * A transcript joined from separately shaped slices (a batch job's result from its
 * chunks), redacted again as a whole: each slice was redacted alone when it was
 * transcribed, so an entity spread over slices (a card number dictated across a pause
 * where the job was sliced) is redacted now, over its whole length, and under `pci` a run
 * of digits spanning a cut is, as at a slice's ends (redact.ts `AudioCuts`). Each
 * segment's part of an entity becomes one `[LABEL]`, keeping the segment's closing mark.
 * Reads the delivered texts (numerals, earlier labels, which end a run), so it needs no
 * word as recognised. Returns the segments' texts.
 */
export function redactJoined(segments: readonly JoinedSegment[], redact: readonly RedactEntity[], metadata?: unknown, prompt?: string | null, keyterms?: readonly string[] | null): string[] {
  const tokens: { word: string; segment: number }[] = [];
  const within: number[] = [];
  segments.forEach((s, i) => {
    if (s.cutBefore && tokens.length) within.push(tokens.length);
    for (const word of s.text.split(/\s+/).filter(Boolean)) tokens.push({ word, segment: i });
  });
  const words = tokens.map((t) => t.word);
  const spans = findEntities(words, redactRules(redact, termsFrom(metadata, prompt, keyterms), { ...NO_CUTS, within }));
  const out: (string | undefined)[] = [...words];
  for (const span of spans) {
    for (let i = span.from; i < span.end; ) {
      let j = i;
      while (j + 1 < span.end && tokens[j + 1]!.segment === tokens[i]!.segment) j++;
      // the segment's part of the entity: one label, with the segment's closing mark
      out[i] = `[${span.label}]${/[.?!,;:]+$/.exec(words[j]!)?.[0] ?? ""}`;
      for (let k = i + 1; k <= j; k++) out[k] = undefined;
      i = j + 1;
    }
  }
  return segments.map((_, s) =>
    tokens
      .map((t, i) => (t.segment === s ? out[i] : undefined))
      .filter((w): w is string => w !== undefined)
      .join(" "),
  );
}
