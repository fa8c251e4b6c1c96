/**
 * Spoken numbers, dates and times as written forms ("twenty five percent" → "25%",
 * "the fifth of january" → "the 5th of January", "three thirty p m" → "3:30 p.m."): the
 * smart-format rules that read several words at once. Each rule gives the words it
 * reads one form (the first word carries it, the rest become "") or leaves them as
 * they are.
 */
import { readDigitRun } from "./spoken-digits";
import { at, capitalise, type Keys } from "./word-shape";


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

export const MONTHS = new Set("january february march april may june july august september october november december".split(" "));
/** "may" and "march" are everyday words: capitalised only inside a recognised date. */
export const COMMON_MONTHS = new Set(["may", "march"]);
/** A number after these is read as a year when it is shaped like one ("in nineteen ninety nine"). */
const YEAR_CUES = new Set(["in", "since", "by", "of", "year", "from", "until"]);
/** Words after a number that make it an amount rather than a year. */
const AMOUNT_UNITS = new Set(["percent", "per", "point", "dollar", "dollars", "euro", "euros"]);
/** "pounds" is left out on purpose: after a number it is as often a weight as a currency. */
const CURRENCY = new Map([["dollar", "$"], ["dollars", "$"], ["euro", "€"], ["euros", "€"]]);
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
export interface Sentence { orig: readonly string[]; k: Keys; out: string[]; touched: boolean[] }

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

/** Digits read one by one: phone numbers, codes, room and flight numbers (spoken-digits.ts). */
function tryDigits(s: Sentence, i: number): number | undefined {
  const run = readDigitRun(s.k, i);
  return run && merge(s, run.from, run.end, run.form);
}

/** Applies the spoken-form rules from left to right, each word read by at most one rule. */
export function formatSpokenForms(s: Sentence): void {
  for (let i = 0; i < s.orig.length; ) {
    i = tryTheDate(s, i) ?? tryMonthDate(s, i) ?? tryTime(s, i) ?? tryYear(s, i) ?? tryDigits(s, i) ?? tryNumber(s, i) ?? i + 1;
  }
}
