/**
 * "Smart format" for recogniser output that has no formatting of its own (PocketSphinx
 * emits lowercase words without punctuation): sentence punctuation and capitals, the
 * pronoun "I", calendar names, the caller's vocabulary casing, and spoken numbers as
 * digits. Pure and dependency-free. Every rule is conservative: a word that already
 * carries uppercase letters, digits or punctuation was formatted by someone else and
 * is left alone, and where a reading is uncertain the words stay as they were.
 */

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
const MAX_TERMS = 500;
const MAX_TERM_CHARS = 100;

/** Number words; a Map (not an object literal) so that tokens like "constructor" never look like numbers. */
const table = (words: string, from: number, step = 1): ReadonlyMap<string, number> =>
  new Map(words.split(" ").map((w, i) => [w, from + i * step] as const));
const DIGITS = table("zero one two three four five six seven eight nine", 0);
const ONES = table("one two three four five six seven eight nine", 1);
const TEENS = table("ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen", 10);
const TENS = table("twenty thirty forty fifty sixty seventy eighty ninety", 20, 10);
const SCALES = new Map([["thousand", 1e3], ["million", 1e6], ["billion", 1e9]]);

type Kind = "unit" | "teen" | "tens" | "hundred" | "scale";
const CARDINALS: readonly (readonly [Kind, ReadonlyMap<string, number>])[] = [
  ["unit", ONES], ["teen", TEENS], ["tens", TENS], ["hundred", new Map([["hundred", 100]])], ["scale", SCALES],
];
const ORDINALS: readonly (readonly [Kind, ReadonlyMap<string, number>])[] = [
  ["unit", table("first second third fourth fifth sixth seventh eighth ninth", 1)],
  ["teen", table("tenth eleventh twelfth thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth", 10)],
  ["tens", table("twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth", 20, 10)],
  ["hundred", new Map([["hundredth", 100]])],
  ["scale", new Map([["thousandth", 1e3], ["millionth", 1e6], ["billionth", 1e9]])],
];

const MONTHS = new Set("january february march april may june july august september october november december".split(" "));
/** "may" and "march" are everyday words: capitalised only inside a recognised date. */
const COMMON_MONTHS = new Set(["may", "march"]);
const WEEKDAYS = new Set("monday tuesday wednesday thursday friday saturday sunday".split(" "));
const I_FORMS = new Set(["i", "i'm", "i'll", "i've", "i'd"]);
/** A number after these is read as a year when it is shaped like one ("in nineteen ninety nine"). */
const YEAR_CUES = new Set(["in", "since", "by", "of"]);
/** Words after a number that make it an amount rather than a year. */
const AMOUNT_UNITS = new Set(["percent", "per", "point", "dollar", "dollars", "euro", "euros"]);
/** "pounds" is left out on purpose: after a number it is as often a weight as a currency. */
const CURRENCY = new Map([["dollar", "$"], ["dollars", "$"], ["euro", "€"], ["euros", "€"]]);

/** Question openers. "had" is left out ("had I known" is a condition, not a question). */
const AUXILIARIES = new Set(
  ("is are was were am do does did can could will would should shall may might must have has " +
    "don't doesn't didn't isn't aren't wasn't weren't can't couldn't won't wouldn't shouldn't haven't hasn't").split(" "),
);
const SUBJECTS = new Set(["i", "you", "we", "they", "he", "she", "it", "there"]);
const WH_WORDS = new Set(["what", "where", "when", "why", "how", "who", "which"]);
const WH_AUXILIARIES = new Set("is are was were do does did can could will would should has have".split(" "));

type Keys = readonly string[];
/** Index access that reads past either end as "", which matches no rule. */
const at = (k: Keys, i: number): string => k[i] ?? "";

/** Unformatted recogniser output: lowercase letters with inner apostrophes ("don't", "y'all"), nothing else. */
const isRaw = (w: string): boolean => /^\p{Ll}+(?:'\p{Ll}+)*$/u.test(w);
/** Lowercase without surrounding punctuation, for comparing words regardless of formatting. */
const bare = (w: string): string => w.replace(/^[^\p{L}\p{N}']+|[^\p{L}\p{N}']+$/gu, "");
/** Abbreviations whose full stop does not end a sentence in a prompt ("Dr. Smith"). */
const TITLES = /^(mr|mrs|ms|dr|prof|st|jr|sr|mt|gen|col|capt|lt|sgt|rev|hon)\.$/i;
const capitalise = (w: string): string => w.charAt(0).toUpperCase() + w.slice(1);
/** Digits, grouped by thousands only from five digits on so that years and "1500" stay plain. */
const digits = (n: number): string => (n >= 10_000 ? String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",") : String(n));

/** English ordinal suffix: 1st, 2nd, 3rd, 4th, but 11th–13th. */
const suffix = (n: number): string =>
  n % 100 >= 11 && n % 100 <= 13 ? "th" : (["th", "st", "nd", "rd"][n % 10] ?? "th");

/** "second" is an ordinal only inside dates; elsewhere "twenty second" is far more often a duration. */
type Ordinals = "none" | "plain" | "date";

function classify(t: string, ordinals: Ordinals): { kind: Kind; value: number; ordinal: boolean } | undefined {
  for (const [kind, map] of CARDINALS) {
    const value = map.get(t);
    if (value !== undefined) return { kind, value, ordinal: false };
  }
  if (ordinals === "none" || (t === "second" && ordinals !== "date")) return undefined;
  for (const [kind, map] of ORDINALS) {
    const value = map.get(t);
    if (value !== undefined) return { kind, value, ordinal: true };
  }
  return undefined;
}

interface Parsed { value: number; end: number; ordinal: boolean }

/**
 * Reads one English cardinal (optionally ending in an ordinal word) starting at i, or
 * nothing. Stops where the words no longer combine, so "twenty twenty" reads as 20
 * followed by another number, which callers treat as a list of numbers, not one.
 */
function parseNumber(k: Keys, i: number, ordinals: Ordinals): Parsed | undefined {
  let total = 0;
  let current = 0;
  let largest = Infinity;
  let ordinal = false;
  let last: "none" | "low" | "tens" | "hundred" | "scale" | "and" = "none";
  let j = i;
  for (; j < k.length && !ordinal; j++) {
    const t = at(k, j);
    const open = last === "none" || last === "hundred" || last === "scale" || last === "and";
    if (t === "a" && j === i && /^(hundred|thousand|million|billion)$/.test(at(k, j + 1))) {
      current = 1;
      last = "low";
      continue;
    }
    if (t === "and") {
      // Only inside a number ("one hundred and five"), never a trailing "and".
      const next = classify(at(k, j + 1), ordinals);
      if ((last === "hundred" || last === "scale") && next && next.kind !== "hundred" && next.kind !== "scale") {
        last = "and";
        continue;
      }
      break;
    }
    const c = classify(t, ordinals);
    if (!c) break;
    if (c.kind === "unit" && (open || last === "tens")) [current, last] = [current + c.value, "low"];
    else if (c.kind === "teen" && open) [current, last] = [current + c.value, "low"];
    else if (c.kind === "tens" && open) [current, last] = [current + c.value, "tens"];
    else if (c.kind === "hundred" && (last === "low" || last === "tens") && current < 100) [current, last] = [current * 100, "hundred"];
    else if (c.kind === "scale" && (last === "low" || last === "tens" || last === "hundred") && c.value < largest) {
      [total, current, largest, last] = [total + current * c.value, 0, c.value, "scale"];
    } else break;
    ordinal = c.ordinal;
  }
  return last === "none" ? undefined : { value: total + current, end: j, ordinal };
}

/** A cardinal with an optional spoken decimal part ("three point five" → "3.5"). */
function parseAmount(k: Keys, i: number): { text: string; value: number; end: number } | undefined {
  const n = at(k, i) === "zero" ? { value: 0, end: i + 1 } : parseNumber(k, i, "none");
  if (!n) return undefined;
  let text = digits(n.value);
  let end = n.end;
  if (at(k, end) === "point" && DIGITS.has(at(k, end + 1))) {
    text += ".";
    for (end++; DIGITS.has(at(k, end)); end++) text += String(DIGITS.get(at(k, end)));
  }
  return { text, value: n.value, end };
}

/** 10–99, or "oh five" for 05: the second half of a year pair and the minutes of a time. */
function parseTwoDigits(k: Keys, i: number): { value: number; end: number } | undefined {
  const unit = ONES.get(at(k, i + 1));
  if ((at(k, i) === "oh" || at(k, i) === "o") && unit !== undefined) return { value: unit, end: i + 2 };
  const teen = TEENS.get(at(k, i));
  if (teen !== undefined) return { value: teen, end: i + 1 };
  const tens = TENS.get(at(k, i));
  if (tens === undefined) return undefined;
  return unit === undefined ? { value: tens, end: i + 1 } : { value: tens + unit, end: i + 2 };
}

/** A year: a spoken pair ("nineteen ninety nine", "twenty twenty four") or a cardinal 1000–2999. */
function parseYear(k: Keys, i: number): { value: number; end: number; pair: boolean } | undefined {
  const first = at(k, i) === "twenty" ? 20 : TEENS.get(at(k, i));
  const second = first !== undefined && first > 10 ? parseTwoDigits(k, i + 1) : undefined;
  if (first !== undefined && second) return { value: first * 100 + second.value, end: second.end, pair: true };
  const n = parseNumber(k, i, "none");
  return n && n.value >= 1000 && n.value < 3000 ? { ...n, pair: false } : undefined;
}

/** One sentence being formatted: k holds the words rules may read ("" where a word is off limits). */
interface Sentence { orig: readonly string[]; k: Keys; out: string[]; touched: boolean[] }

/** Gives the tokens [from, to) one formatted form: the first carries it, the rest become "". */
function merge(s: Sentence, from: number, to: number, form: string): number {
  for (let j = from; j < to; j++) {
    s.out[j] = j === from ? form : "";
    s.touched[j] = true;
  }
  return to;
}

/** "the fifth of january [twenty twenty four]" → "the 5th of January [2024]". */
function tryTheDate(s: Sentence, i: number): number | undefined {
  if (at(s.k, i) !== "the") return undefined;
  const day = parseNumber(s.k, i + 1, "date");
  if (!day?.ordinal || day.value > 31 || at(s.k, day.end) !== "of" || !MONTHS.has(at(s.k, day.end + 1))) return undefined;
  merge(s, i + 1, day.end, digits(day.value) + suffix(day.value));
  const end = merge(s, day.end + 1, day.end + 2, capitalise(at(s.k, day.end + 1)));
  const year = parseYear(s.k, end);
  return year ? merge(s, end, year.end, String(year.value)) : end;
}

/**
 * "january fifth [twenty twenty four]" → "January 5th[, 2024]", "january twenty twenty
 * four" → "January 2024". "may"/"march" need an unmistakable date after them: an ordinal
 * day, a day and a year, or a year pair ("we march ten miles" stays as it is).
 */
function tryMonthDate(s: Sentence, i: number): number | undefined {
  const month = at(s.k, i);
  if (!MONTHS.has(month)) return undefined;
  const common = COMMON_MONTHS.has(month);
  const day = parseNumber(s.k, i + 1, "date");
  const direct = day?.ordinal ? undefined : parseYear(s.k, i + 1);
  if (direct && (direct.pair || !common)) {
    merge(s, i, i + 1, capitalise(month));
    return merge(s, i + 1, direct.end, String(direct.value));
  }
  if (!day || day.value < 1 || day.value > 31) return undefined;
  const year = parseYear(s.k, day.end);
  if (common && !day.ordinal && !year) return undefined;
  merge(s, i, i + 1, capitalise(month));
  const end = merge(s, i + 1, day.end, digits(day.value) + (day.ordinal ? suffix(day.value) : "") + (year ? "," : ""));
  return year ? merge(s, end, year.end, String(year.value)) : end;
}

/** An am/pm marker right after an hour: "a m", "p m", "am", "pm", or an already written "a.m.". */
function marker(s: Sentence, j: number): { form: string; end: number; keep: boolean } | undefined {
  const t = at(s.k, j);
  if ((t === "a" || t === "p") && at(s.k, j + 1) === "m") return { form: `${t}.m.`, end: j + 2, keep: false };
  if (t === "am" || t === "pm") return { form: `${t.charAt(0)}.m.`, end: j + 1, keep: false };
  if (/^[ap]\.m\.$/i.test(s.orig[j] ?? "")) return { form: "", end: j + 1, keep: true };
  return undefined;
}

/** "three o'clock" → "3 o'clock", "three thirty p m" → "3:30 p.m.", "three a m" → "3 a.m.". */
function tryTime(s: Sentence, i: number): number | undefined {
  const hour = ONES.get(at(s.k, i)) ?? TEENS.get(at(s.k, i));
  if (hour === undefined || hour > 12) return undefined;
  if (at(s.k, i + 1) === "o'clock") return merge(s, i, i + 1, String(hour)) + 1;
  const minutes = parseTwoDigits(s.k, i + 1);
  const j = minutes && minutes.value < 60 ? minutes.end : i + 1;
  const m = marker(s, j);
  if (!m) return undefined;
  merge(s, i, j, j > i + 1 && minutes ? `${hour}:${String(minutes.value).padStart(2, "0")}` : String(hour));
  return m.keep ? m.end : merge(s, j, m.end, m.form);
}

/** "in nineteen ninety nine" → "in 1999": a year pair is only trusted after a cue word. */
function tryYear(s: Sentence, i: number): number | undefined {
  if (!YEAR_CUES.has(at(s.k, i - 1))) return undefined;
  const year = parseYear(s.k, i);
  return year && !AMOUNT_UNITS.has(at(s.k, year.end)) ? merge(s, i, year.end, String(year.value)) : undefined;
}

/** "and" after a dollar amount, then 0–99 "cents". */
function parseCents(k: Keys, j: number): { value: number; end: number } | undefined {
  const c = parseNumber(k, at(k, j) === "and" ? j + 1 : j, "none");
  return c && c.value < 100 && /^cents?$/.test(at(k, c.end)) ? { value: c.value, end: c.end + 1 } : undefined;
}

const startsNumber = (t: string): boolean => t === "zero" || classify(t, "plain") !== undefined;

/** Percentages, money, multi-word ordinals and cardinals; a lone digit word ("one of them") stays a word. */
function tryNumber(s: Sentence, i: number): number | undefined {
  const a = parseAmount(s.k, i);
  if (!a) return undefined;
  const unit = at(s.k, a.end);
  if (unit === "percent") return merge(s, i, a.end + 1, `${a.text}%`);
  if (unit === "per" && at(s.k, a.end + 1) === "cent") return merge(s, i, a.end + 2, `${a.text}%`);
  const symbol = CURRENCY.get(unit);
  if (symbol) {
    const cents = a.text.includes(".") ? undefined : parseCents(s.k, a.end + 1);
    const fraction = cents ? `.${String(cents.value).padStart(2, "0")}` : "";
    return merge(s, i, cents?.end ?? a.end + 1, symbol + a.text + fraction);
  }
  const ordinal = parseNumber(s.k, i, "plain");
  if (ordinal?.ordinal && ordinal.end - i > 1) return merge(s, i, ordinal.end, digits(ordinal.value) + suffix(ordinal.value));
  if (startsNumber(at(s.k, a.end))) {
    // Numbers read one after another ("five five five", "twenty twenty") are a list, a
    // code or an unmarked year: which one is unclear, so they all stay words.
    let j = a.end;
    while (startsNumber(at(s.k, j))) j++;
    return j;
  }
  return a.end - i > 1 || a.value >= 10 ? merge(s, i, a.end, a.text) : a.end;
}

/** Certain questions only: an auxiliary then a subject ("do you"), or a wh-word then an auxiliary ("what is"). */
function isQuestion(words: readonly string[]): boolean {
  const [first = "", second = ""] = words.map((w) => bare(w).toLowerCase()).filter(Boolean);
  if (WH_WORDS.has(first)) return WH_AUXILIARIES.has(second);
  // "do it now" and "have it your way" are orders, not questions.
  if (second === "it" && (first === "do" || first === "have")) return false;
  return AUXILIARIES.has(first) && SUBJECTS.has(second);
}

/** Case-insensitive term lookup: first word → the terms' words, longest term first. */
type TermIndex = ReadonlyMap<string, readonly (readonly string[])[]>;

function indexTerms(terms: readonly string[]): TermIndex {
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
function applyTerms(orig: readonly string[], raw: readonly boolean[], terms: TermIndex, out: string[]): number[] {
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

/** Formats the words of one sentence; `close` says whether it gets its final punctuation. */
function formatSentence(orig: readonly string[], terms: TermIndex, close: boolean): string[] {
  const raw = orig.map(isRaw);
  const out = [...orig];
  const termed = applyTerms(orig, raw, terms, out);
  const s: Sentence = { orig, k: orig.map((w, i) => (raw[i] && !termed[i] ? w : "")), out, touched: termed.map(Boolean) };
  for (let i = 0; i < orig.length; ) {
    i = tryTheDate(s, i) ?? tryMonthDate(s, i) ?? tryTime(s, i) ?? tryYear(s, i) ?? tryNumber(s, i) ?? i + 1;
  }
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

/** Terms for FormatOptions.terms from a job's metadata (every string value, recursively, arrays included, each string also split on commas/semicolons/newlines) and a prompt (its words that contain a capital letter or digit, and the whole prompt's capitalised multi-word runs). Dedupe, drop empties, cap at 500 terms of at most 100 chars. */
export function termsFrom(metadata: unknown, prompt?: string | null): string[] {
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
