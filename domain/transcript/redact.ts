/**
 * Which words of a run are an entity to redact (docs/formatting.md "Redaction"): card
 * numbers (Luhn-valid), their expiry and security code in context, social security
 * numbers, phone numbers, e-mail addresses (written or spoken "name at example dot com"),
 * any number, and the caller's names and terms. Pure; the redaction stage
 * (redact-stage.ts) replaces each span by its label.
 */
import type { RedactEntity } from "../../schemas/redact";
import { digitsAt } from "./spoken-digits";
import { indexTerms } from "./terms";
import { at, bare } from "./word-shape";

export type EntityLabel = "CARD_NUMBER" | "CARD_EXPIRY" | "CARD_SECURITY_CODE" | "SSN" | "PHONE_NUMBER" | "EMAIL" | "NUMBER" | "NAME";

/** Words [from, end) of a run are one entity. */
export interface EntitySpan { from: number; end: number; label: EntityLabel }

/** What a request asked to redact, as the detector reads it. */
export interface RedactRules {
  pci: boolean;
  ssn: boolean;
  phone: boolean;
  email: boolean;
  numbers: boolean;
  /** Names and terms (pii): matched case-insensitively. */
  terms: readonly string[];
  /** Where the run's audio was cut out of a longer stream (a realtime item, a job's slice): see `AudioCuts`. */
  cuts: AudioCuts;
}

/**
 * Where a run of words was cut out of longer audio: a realtime item (both ends), a
 * batch job's slice (each end but the recording's own). A card number dictated in groups
 * with pauses is cut there, and a finished item or a stored slice cannot be taken back
 * when the next one shows the rest. So under `pci` a run of `CUT_DIGITS` or more digits
 * touching a cut is redacted as a card number: the safe side (docs/formatting.md,
 * "Redaction"). No run in clear at a cut holds more than `CUT_DIGITS` − 1
 * digits, so no stored record holds more than 4 digits of a number in clear.
 */
export interface AudioCuts {
  start: boolean;
  end: boolean;
  /** Cuts inside the run, as word indices (a cut before word i): a transcript joined from slices (joined.ts). */
  within?: readonly number[];
}
export const NO_CUTS: AudioCuts = { start: false, end: false };
/** A realtime item: the VAD (or the client's commit) cut it at both ends. */
export const ITEM_CUTS: AudioCuts = { start: true, end: true };
const CUT_DIGITS = 3;

export function redactRules(entities: readonly RedactEntity[], terms: readonly string[], cuts: AudioCuts = NO_CUTS): RedactRules {
  const has = (e: RedactEntity) => entities.includes(e) || entities.includes("pii");
  return { pci: has("pci"), ssn: has("ssn"), phone: has("phone"), email: has("email"), numbers: has("numbers"), terms: entities.includes("pii") ? terms : [], cuts };
}

const EXPIRY_CUES = new Set(["expiry", "expiration", "expires", "exp", "expire", "valid", "thru", "through"]);
const CODE_CUES = new Set(["cvv", "cvc", "csc", "cvv2", "security", "verification"]);
const SSN_CUES = new Set(["social", "ssn", "security"]);
/** Spoken joints inside a number ("four one one one dash one one …"). */
const JOINTS = new Set(["dash", "-", "hyphen"]);
const SCALES = new Set(["hundred", "thousand", "million", "billion"]);
const EMAIL_JOINTS = new Set(["dot", "underscore", "dash", "hyphen"]);
const TLDS = new Set("com org net edu gov io co uk de fr info biz us ca au nl es it ch eu me ai dev app".split(" "));
/** Words before "at" that are not a mailbox ("email me at …"). */
const NOT_LOCAL = new Set("me us him her them it you look home meet be is at email mail write".split(" "));

/** Luhn's check digit test, as card numbers carry it. */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = Number(digits[digits.length - 1 - i]);
    if (i % 2 === 1) d = d * 2 > 9 ? d * 2 - 9 : d * 2;
    sum += d;
  }
  return digits.length > 0 && sum % 10 === 0;
}

/** The words in lower case without surrounding punctuation, as the rules read them. */
export const keysOf = (words: readonly string[]): string[] => words.map((w) => bare(w).toLowerCase());

/** Runs of digits (spoken or written, with "dash" joints) in the words: their span and digits. */
function digitRuns(k: readonly string[], raw: readonly string[]): { from: number; end: number; digits: string; written: boolean }[] {
  const runs: { from: number; end: number; digits: string; written: boolean }[] = [];
  for (let i = 0; i < k.length; ) {
    let step = digitsAt(k, raw, i, false);
    if (!step) {
      i++;
      continue;
    }
    let digits = "";
    let written = false;
    let j = i;
    while (step) {
      digits += step.digits;
      written ||= /\d/.test(raw[j] ?? "");
      j = step.end;
      step = digitsAt(k, raw, j, true);
      const joint = JOINTS.has(at(k, j)) || raw[j] === "-";
      const after = !step && joint ? digitsAt(k, raw, j + 1, true) : undefined;
      if (after) [step, j] = [after, j + 1];
    }
    runs.push({ from: at(k, i - 1) === "plus" ? i - 1 : i, end: j, digits, written });
    i = j;
  }
  return runs;
}

const near = (k: readonly string[], i: number, cues: ReadonlySet<string>, span = 5) =>
  Array.from({ length: span }, (_, d) => at(k, i - 1 - d)).some((w) => cues.has(w));

/** The label of a run of digits under the rules, or none. */
function digitLabel(k: readonly string[], run: { from: number; digits: string; written: boolean }, rules: RedactRules): EntityLabel | undefined {
  const n = run.digits.length;
  const plus = at(k, run.from) === "plus";
  if (rules.pci && n >= 13 && n <= 19 && luhnValid(run.digits)) return "CARD_NUMBER";
  if (rules.pci && n >= 3 && n <= 4 && near(k, run.from, CODE_CUES) && !near(k, run.from, new Set(["social"]))) return "CARD_SECURITY_CODE";
  if (rules.pci && n >= 3 && n <= 6 && near(k, run.from, EXPIRY_CUES)) return "CARD_EXPIRY";
  if (rules.ssn && n === 9 && near(k, run.from, SSN_CUES, 6)) return "SSN";
  if (rules.phone && (plus ? n >= 7 : n === 7 || n === 10 || (n === 11 && run.digits.startsWith("1")))) return "PHONE_NUMBER";
  if (rules.numbers && (n >= 2 || run.written)) return "NUMBER";
  return undefined;
}

/** A digit run touching a cut, which may be a piece of a card number spoken across it (`AudioCuts`). */
function cutLabel(k: readonly string[], run: { from: number; digits: string }, end: number, rules: RedactRules): EntityLabel | undefined {
  const { start, end: last, within = [] } = rules.cuts;
  const atCut = (start && run.from === 0) || (last && end === k.length) || within.some((c) => run.from <= c && c <= end);
  return rules.pci && atCut && run.digits.length >= CUT_DIGITS ? "CARD_NUMBER" : undefined;
}

/** Spoken and written e-mail addresses: "john dot smith at example dot com", "john@example.com". */
function emailSpans(k: readonly string[], raw: readonly string[]): EntitySpan[] {
  const spans: EntitySpan[] = [];
  raw.forEach((w, i) => {
    if (/^[^@\s]+@[^@\s]+\.[a-z]{2,}[.,;:!?]*$/i.test(w)) spans.push({ from: i, end: i + 1, label: "EMAIL" });
  });
  for (let a = 1; a < k.length; a++) {
    if (k[a] !== "at" || !k[a - 1] || NOT_LOCAL.has(k[a - 1]!)) continue;
    // the domain: a word, then one or more "dot <word>", the last a top-level domain
    let end = a + 2;
    if (!at(k, a + 1) || at(k, a + 1) === "dot") continue;
    while (at(k, end) === "dot" && at(k, end + 1)) end += 2;
    if (end === a + 2 || !TLDS.has(at(k, end - 1))) continue;
    let from = a - 1;
    while (EMAIL_JOINTS.has(at(k, from - 1)) && at(k, from - 2) && !NOT_LOCAL.has(at(k, from - 2))) from -= 2;
    spans.push({ from, end, label: "EMAIL" });
  }
  return spans;
}

/** The caller's names and terms, matched as whole words. */
function termSpans(k: readonly string[], terms: readonly string[]): EntitySpan[] {
  const index = indexTerms(terms);
  const spans: EntitySpan[] = [];
  for (let i = 0; i < k.length; i++) {
    const hit = index.get(at(k, i))?.find((words) => words.every((w, d) => at(k, i + d) === w.toLowerCase()));
    if (hit) {
      spans.push({ from: i, end: i + hit.length, label: "NAME" });
      i += hit.length - 1;
    }
  }
  return spans;
}

/**
 * The entity spans of a run of words (as recognised or as written: digits, "@"),
 * sorted and not overlapping; where two overlap the earlier-found kind wins (e-mail,
 * then digits, then names).
 */
export function findEntities(words: readonly string[], rules: RedactRules): EntitySpan[] {
  const k = keysOf(words);
  const found: EntitySpan[] = rules.email ? emailSpans(k, words) : [];
  for (const run of digitRuns(k, words)) {
    // with `numbers`, "three hundred", "two thousand and five" are one number
    let end = run.end;
    if (rules.numbers) while (SCALES.has(at(k, end)) || (at(k, end) === "and" && SCALES.has(at(k, end - 1)) && digitsAt(k, words, end + 1, true))) end = digitsAt(k, words, end + 1, true)?.end ?? end + 1;
    const label = end > run.end ? "NUMBER" : (digitLabel(k, run, rules) ?? cutLabel(k, run, end, rules));
    if (label) found.push({ from: run.from, end, label });
  }
  if (rules.terms.length) found.push(...termSpans(k, rules.terms));
  const spans: EntitySpan[] = [];
  for (const s of found) if (!spans.some((t) => s.from < t.end && t.from < s.end)) spans.push(s);
  return spans.sort((a, b) => a.from - b.from);
}

/** Whether the word may still become part of an entity when more words follow it (a digit, a joint, an e-mail's pieces). */
export function mayContinue(k: readonly string[], raw: readonly string[], i: number, rules: RedactRules): boolean {
  const w = at(k, i);
  if (digitsAt(k, raw, i, true) || /\d/.test(raw[i] ?? "") || JOINTS.has(w) || w === "plus" || w === "double" || w === "triple") return true;
  if (rules.numbers && (SCALES.has(w) || (w === "and" && SCALES.has(at(k, i - 1))))) return true;
  if (rules.email && (w === "at" || EMAIL_JOINTS.has(w) || EMAIL_JOINTS.has(at(k, i + 1)) || at(k, i + 1) === "at" || raw[i]?.includes("@"))) return true;
  return false;
}
