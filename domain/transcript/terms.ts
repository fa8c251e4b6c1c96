/**
 * The caller's vocabulary for smart format: terms gathered from a job's metadata and a
 * request's prompt, and applied in the casing the caller gave.
 */
import { at, bare } from "./word-shape";

const MAX_TERMS = 500;
const MAX_TERM_CHARS = 100;

/** Abbreviations whose full stop does not end a sentence in a prompt ("Dr. Smith"). */
const TITLES = /^(mr|mrs|ms|dr|prof|st|jr|sr|mt|gen|col|capt|lt|sgt|rev|hon)\.$/i;

/** Case-insensitive term lookup: first word → the terms' words, longest term first. */
export type TermIndex = ReadonlyMap<string, readonly (readonly string[])[]>;

export function indexTerms(terms: readonly string[]): TermIndex {
  const index = new Map<string, string[][]>();
  for (const term of terms) {
    const words = term.split(/\s+/).map(bare).filter(Boolean);
    const head = words[0]?.toLowerCase();
    if (head === undefined) continue;
    const list = index.get(head) ?? [];
    const key = words.join(" ").toLowerCase();
    if (!list.some((w) => w.join(" ").toLowerCase() === key)) list.push(words);
    index.set(head, list.sort((x, y) => y.length - x.length));
  }
  return index;
}

/** Applies the longest matching term at each position; returns 0 (no term), 1 (lowercase term) or 2 per token. */
export function applyTerms(orig: readonly string[], raw: readonly boolean[], terms: TermIndex, out: string[]): number[] {
  const state = orig.map(() => 0);
  for (let i = 0; i < orig.length; ) {
    const candidates = raw[i] ? terms.get(at(orig, i)) : undefined;
    const hit = candidates?.find((words) => words.every((w, d) => raw[i + d] && orig[i + d] === w.toLowerCase()));
    if (!hit) {
      i++;
      continue;
    }
    const cased = /\p{Lu}/u.test(hit.join("")) ? 2 : 1;
    hit.forEach((w, d) => ((out[i + d] = w), (state[i + d] = cased)));
    i += hit.length;
  }
  return state;
}

/** Terms for FormatOptions.terms from a job's metadata (every string value, recursively, arrays included, each string also split on commas/semicolons/newlines) and a prompt (its words that contain a capital letter or digit, and the whole prompt's capitalised multi-word runs), and the request's keyterms (each as written: the caller named it). Dedupe, drop empties, cap at 500 terms of at most 100 chars. */
export function termsFrom(metadata: unknown, prompt?: string | null, keyterms?: readonly string[] | null): string[] {
  const terms: string[] = [];
  const seen = new Set<string>();
  const add = (term: string): void => {
    const t = term.trim().replace(/\s+/g, " ");
    const key = t.toLowerCase();
    if (!t || t.length > MAX_TERM_CHARS || terms.length >= MAX_TERMS || seen.has(key)) return;
    seen.add(key);
    terms.push(t);
  };
  const visited = new WeakSet<object>();
  const visit = (value: unknown, depth: number): void => {
    if (terms.length >= MAX_TERMS) return;
    if (typeof value === "string") {
      add(value);
      for (const part of value.split(/[,;\r\n]+/)) add(part);
    } else if (typeof value === "object" && value !== null && depth < 32 && !visited.has(value)) {
      visited.add(value);
      for (const v of Object.values(value)) visit(v, depth + 1);
    }
  };
  visit(metadata, 0);
  for (const term of keyterms ?? []) add(term);

  // A single capitalised word is a term only when it is a name on its own: not a
  // sentence's first word ("The"), and not one word of a longer name (or every "new"
  // would become "New" after "New York"). Inner capitals and digits ("JFK", "iPhone",
  // "500mg") always make a term. Punctuation ends a run: "Paris, London" are two names.
  const words = (prompt ?? "").split(/\s+/).filter(Boolean);
  let run: { word: string; alone: boolean }[] = [];
  const flush = (): void => {
    // A run opened by a sentence's first word also counts without it: "Call JFK Airport".
    const names = run[0]?.alone === false ? [run, run.slice(1)] : [run];
    for (const r of names) if (r.length > 1 || r[0]?.alone) add(r.map((x) => x.word).join(" "));
    run = [];
  };
  words.forEach((word, i) => {
    const w = bare(word);
    const previous = words[i - 1] ?? ".";
    const sentenceStart = /[.?!]$/.test(previous) && !TITLES.test(previous);
    if (/\p{N}|.\p{Lu}/u.test(w)) add(w);
    if (/^\p{Lu}/u.test(w)) run.push({ word: w, alone: !sentenceStart });
    else flush();
    if (/[^\p{L}\p{N}']$/u.test(word)) flush();
  });
  flush();
  return terms;
}
