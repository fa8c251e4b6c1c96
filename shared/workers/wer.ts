/**
 * Word error rate for accuracy tests and benchmarks: word-level Levenshtein distance
 * (substitutions + deletions + insertions) over the reference length, after a light
 * normalisation (lower case, punctuation dropped, common abbreviations expanded).
 */
const expansions: Record<string, string> = { mr: "mister", mrs: "missus", dr: "doctor", st: "saint" };

export function normaliseWords(text: string): string[] {
  return text
    .toLowerCase()
    .replace(/<\/?s>|\([^)]*\)$/g, " ")
    .replace(/[^a-z0-9' ]+/g, " ")
    .split(/\s+/)
    .filter(Boolean)
    .map((w) => expansions[w] ?? w);
}

export interface WerResult {
  wer: number;
  errors: number;
  referenceWords: number;
}

export function wordErrorRate(reference: string, hypothesis: string): WerResult {
  return tokenErrorRate(normaliseWords(reference), normaliseWords(hypothesis));
}

function tokenErrorRate(ref: string[], hyp: string[]): WerResult {
  let prev = Array.from({ length: hyp.length + 1 }, (_, j) => j);
  for (let i = 1; i <= ref.length; i++) {
    const row = [i];
    for (let j = 1; j <= hyp.length; j++) {
      const sub = prev[j - 1]! + (ref[i - 1] === hyp[j - 1] ? 0 : 1);
      row.push(Math.min(sub, prev[j]! + 1, row[j - 1]! + 1));
    }
    prev = row;
  }
  const errors = prev[hyp.length]!;
  return { wer: ref.length === 0 ? (hyp.length === 0 ? 0 : 1) : errors / ref.length, errors, referenceWords: ref.length };
}

/**
 * Error rate of formatted text (issue 16's formatted score): the same word-level
 * Levenshtein distance, over whitespace-separated tokens compared exactly — case,
 * punctuation and numerals count ("Americans." ≠ "americans", "25%" ≠ "twenty").
 */
export function formattedErrorRate(reference: string, hypothesis: string): WerResult {
  return tokenErrorRate(reference.split(/\s+/).filter(Boolean), hypothesis.split(/\s+/).filter(Boolean));
}
