/**
 * "Smart format" for recogniser output that has no formatting of its own (PocketSphinx
 * emits lowercase words without punctuation): sentence punctuation and capitals, the
 * pronoun "I", calendar names, the caller's vocabulary casing, and spoken numbers as
 * digits. Pure and dependency-free. Every rule is conservative: a word that already
 * carries uppercase letters, digits or punctuation was formatted by someone else and
 * is left alone, and where a reading is uncertain the words stay as they were.
 */
import { COMMON_MONTHS, formatSpokenForms, MONTHS, type Sentence } from "./spoken-forms";
import { applyTerms, indexTerms, type TermIndex } from "./terms";
import { at, bare, capitalise, isRaw } from "./word-shape";

export interface FormatWord { word: string; start_ms?: number; end_ms?: number }

export interface FormatOptions {
  /** Vocabulary in the casing the user gave (job metadata strings, request prompt words); matched case-insensitively, single or multi-word ("New York", "JFK", "Metformin"). */
  terms?: readonly string[];
  /** A pause between two words at least this long ends a sentence (default 700 ms). Only applies where both words have timings. */
  sentenceGapMs?: number;
  /** Whether the last word ends a sentence (an utterance, segment or chunk end). Default true. */
  endsSentence?: boolean;
}

export type FormattedWord<W extends FormatWord = FormatWord> = W & { punctuated_word: string };

const DEFAULT_GAP_MS = 700;
const WEEKDAYS = new Set("monday tuesday wednesday thursday friday saturday sunday".split(" "));
const I_FORMS = new Set(["i", "i'm", "i'll", "i've", "i'd"]);

/** Question openers. "had" is left out ("had I known" is a condition, not a question). */
const AUXILIARIES = new Set(
  ("is are was were am do does did can could will would should shall may might must have has " +
    "don't doesn't didn't isn't aren't wasn't weren't can't couldn't won't wouldn't shouldn't haven't hasn't").split(" "),
);
const SUBJECTS = new Set(["i", "you", "we", "they", "he", "she", "it", "there"]);
const WH_WORDS = new Set(["what", "where", "when", "why", "how", "who", "which"]);
const WH_AUXILIARIES = new Set("is are was were do does did can could will would should has have".split(" "));

/** Certain questions only: an auxiliary then a subject ("do you"), or a wh-word then an auxiliary ("what is"). */
function isQuestion(words: readonly string[]): boolean {
  const [first = "", second = ""] = words.map((w) => bare(w).toLowerCase()).filter(Boolean);
  if (WH_WORDS.has(first)) return WH_AUXILIARIES.has(second);
  // "do it now" and "have it your way" are orders, not questions.
  if (second === "it" && (first === "do" || first === "have")) return false;
  return AUXILIARIES.has(first) && SUBJECTS.has(second);
}

/** Formats the words of one sentence; `close` says whether it gets its final punctuation. */
function formatSentence(orig: readonly string[], terms: TermIndex, close: boolean): string[] {
  const raw = orig.map(isRaw);
  const out = [...orig];
  const termed = applyTerms(orig, raw, terms, out);
  const s: Sentence = { orig, k: orig.map((w, i) => (raw[i] && !termed[i] ? w : "")), out, touched: termed.map(Boolean) };
  formatSpokenForms(s);
  s.k.forEach((t, j) => {
    if (t && !s.touched[j] && (I_FORMS.has(t) || WEEKDAYS.has(t) || (MONTHS.has(t) && !COMMON_MONTHS.has(t)))) out[j] = capitalise(t);
  });
  const first = out.findIndex((w) => w !== "");
  if (first >= 0 && raw[first] && termed[first] !== 2) out[first] = capitalise(at(out, first));
  const last = out.findLastIndex((w) => w !== "");
  if (close && last >= 0) {
    const mark = isQuestion(orig) ? "?" : ".";
    const w = at(out, last);
    // Don't double-punctuate, but "3 p.m." may still become "3 p.m.?".
    if (!/[.?!,;:]$/.test(w) || (mark === "?" && /[ap]\.m\.$/i.test(w))) out[last] = w + mark;
  }
  return out;
}

/** A sentence ends at a long enough pause, or where the input already ends one ("world. It"). */
function sentenceBreak(a: FormatWord, b: FormatWord, gapMs: number): boolean {
  if (typeof a.end_ms === "number" && typeof b.start_ms === "number" && b.start_ms - a.end_ms >= gapMs) return true;
  // "p.m. on" or "Dr. who" are not sentence ends; a capitalised or formatted next word is.
  return /[.?!]$/.test(a.word) && !isRaw(b.word);
}

/** Formats recognised words; returns the formatted text and every input word (same order, same count, all other fields kept) with its formatted form. */
export function smartFormat<W extends FormatWord>(
  words: readonly W[],
  options: FormatOptions = {},
): { text: string; words: FormattedWord<W>[] } {
  const gapMs = options.sentenceGapMs ?? DEFAULT_GAP_MS;
  const terms = indexTerms(options.terms ?? []);
  const out: string[] = [];
  let start = 0;
  words.forEach((word, i) => {
    const next = words[i + 1];
    if (next && !sentenceBreak(word, next, gapMs)) return;
    const close = next !== undefined || options.endsSentence !== false;
    for (const w of formatSentence(words.slice(start, i + 1).map((x) => x.word), terms, close)) out.push(w);
    start = i + 1;
  });
  return {
    text: out.filter((w) => w !== "").join(" "),
    words: words.map((w, i) => ({ ...w, punctuated_word: at(out, i) })),
  };
}

/** Same for text without timings (splits on whitespace). */
export function smartFormatText(text: string, options?: FormatOptions): string {
  const words = text.split(/\s+/).filter(Boolean).map((word) => ({ word }));
  return smartFormat(words, options).text;
}
