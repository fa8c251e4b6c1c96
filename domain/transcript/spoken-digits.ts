/**
 * Digits read one by one, as people dictate phone, card and account numbers, room and
 * flight numbers and codes (docs/formatting.md): "five five five one two three four" →
 * "555-1234", "room four oh four" → "404", "plus four four …" → "+44…". Pure; the
 * smart-format rule (`readDigitRun`) and the redaction stage (`digitsOf`) share it.
 */
import { at, type Keys } from "./word-shape";

const DIGIT_WORDS = new Map("zero one two three four five six seven eight nine".split(" ").map((w, i) => [w, String(i)] as const));
const TEEN_WORDS = new Map("ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split(" ").map((w, i) => [w, String(10 + i)] as const));
const TENS_WORDS = new Map("twenty thirty forty fifty sixty seventy eighty ninety".split(" ").map((w, i) => [w, String(2 + i)] as const));
const REPEAT = new Map([["double", 2], ["triple", 3]]);

/** Words right before a run that make even two or three digits a code ("room four oh four", "flight two one two"). */
const CODE_CUES = new Set(
  ("room flight gate extension ext apartment apt suite unit platform bus route channel code pin number " +
    "account card order ticket seat reference confirmation zip postcode box policy member id invoice serial tracking").split(" "),
);
/** Any of these among the three words before a run keeps it from being grouped as a phone number. */
const NOT_PHONE = new Set(
  ("card account pin code order zip postcode ticket reference confirmation room flight gate seat extension " +
    "security social policy member id invoice serial tracking routing").split(" "),
);

/**
 * One step of a digit run at i: its digits and the words it took, or nothing.
 * `afterDigit`: a digit came right before (so "oh" is a zero); `pairs`: two-digit groups
 * count ("five five five twelve thirty four").
 */
function digitStep(k: Keys, i: number, afterDigit: boolean, pairs: boolean): { digits: string; end: number; single: boolean } | undefined {
  const t = at(k, i);
  const d = DIGIT_WORDS.get(t);
  if (d !== undefined) return { digits: d, end: i + 1, single: true };
  if ((t === "oh" || t === "o") && afterDigit) return { digits: "0", end: i + 1, single: true };
  const times = REPEAT.get(t);
  const next = DIGIT_WORDS.get(at(k, i + 1)) ?? (at(k, i + 1) === "oh" ? "0" : undefined);
  if (times !== undefined && next !== undefined) return { digits: next.repeat(times), end: i + 2, single: true };
  if (!pairs) return undefined;
  const teen = TEEN_WORDS.get(t);
  if (teen !== undefined) return { digits: teen, end: i + 1, single: false };
  const tens = TENS_WORDS.get(t);
  if (tens === undefined) return undefined;
  const unit = DIGIT_WORDS.get(at(k, i + 1));
  return unit !== undefined && unit !== "0" ? { digits: tens + unit, end: i + 2, single: false } : { digits: `${tens}0`, end: i + 1, single: false };
}

/** The run of spoken digits starting at i: single digits first, pairs only after three of them. */
function spokenRun(k: Keys, i: number): { digits: string; end: number; singles: number; marked: boolean } {
  let digits = "";
  let singles = 0;
  let marked = false;
  let j = i;
  for (let step = digitStep(k, j, false, false); step; step = digitStep(k, j, true, singles >= 3)) {
    if (/^(oh|o|double|triple)$/.test(at(k, j))) marked = true;
    if (step.single) singles += step.digits.length;
    digits += step.digits;
    j = step.end;
  }
  return { digits, end: j, singles, marked };
}

/** How a run of digits is written: a phone number's groups where it has a phone's length and nothing says otherwise, else the plain digits. */
function writeDigits(digits: string, international: boolean, phone: boolean, ssn: boolean): string {
  if (international) return digits.length === 11 && digits.startsWith("1") ? `+1 ${digits.slice(1, 4)}-${digits.slice(4, 7)}-${digits.slice(7)}` : `+${digits}`;
  if (ssn && digits.length === 9) return `${digits.slice(0, 3)}-${digits.slice(3, 5)}-${digits.slice(5)}`;
  if (!phone) return digits;
  if (digits.length === 7) return `${digits.slice(0, 3)}-${digits.slice(3)}`;
  if (digits.length === 10) return `${digits.slice(0, 3)}-${digits.slice(3, 6)}-${digits.slice(6)}`;
  if (digits.length === 11 && digits.startsWith("1")) return `1-${digits.slice(1, 4)}-${digits.slice(4, 7)}-${digits.slice(7)}`;
  return digits;
}

/**
 * A run of digits spoken one by one at i, as written, or nothing. Taken when it has four
 * or more single digits, three with an "oh" or a "double"/"triple" in it or followed by
 * pairs up to seven digits, or two or more right
 * after a code word ("room", "flight", "gate", "extension", "number", …; "room number"
 * too). A "plus" before it makes it international (`from` is then the "plus"). A run
 * followed by an amount word ("dollars", "percent", "point") is left to the number rules.
 */
export function readDigitRun(k: Keys, i: number): { from: number; end: number; form: string } | undefined {
  const run = spokenRun(k, i);
  if (run.digits.length < 2) return undefined;
  const cued = CODE_CUES.has(at(k, i - 1)) || (at(k, i - 1) === "is" && CODE_CUES.has(at(k, i - 2)));
  if (run.singles < 4 && !(run.singles === 3 && (run.marked || run.digits.length >= 7)) && !cued) return undefined;
  if (/^(percent|per|point|dollars?|euros?|cents?|pounds?)$/.test(at(k, run.end))) return undefined;
  const before = [at(k, i - 1), at(k, i - 2), at(k, i - 3), at(k, i - 4)];
  const international = at(k, i - 1) === "plus" && run.digits.length >= 7;
  const ssn = before.includes("social") || before.includes("ssn");
  const phone = !before.slice(0, 3).some((w) => NOT_PHONE.has(w));
  return { from: international ? i - 1 : i, end: run.end, form: writeDigits(run.digits, international, phone, ssn) };
}

/**
 * The digits at word i for the redaction stage, or nothing: a written token's digits
 * ("4111", "555-1234" → "5551234", "+44" → "44"), or one spoken step (a digit, "double
 * five", a teen or tens word with its unit; "oh" right after a digit). `k` holds the words
 * in lower case without surrounding punctuation, `raw` as they came.
 */
export function digitsAt(k: Keys, raw: readonly string[], i: number, afterDigit: boolean): { digits: string; end: number } | undefined {
  const w = raw[i] ?? "";
  if (/\d/.test(w)) return /^[+(]?\d[\d\s().\-/]*[.,;:!?]*$/.test(w) ? { digits: w.replace(/\D/g, ""), end: i + 1 } : undefined;
  // "oh four …" opens a run here (redaction errs on the side of taking it)
  const opens = !afterDigit && (at(k, i) === "oh" || at(k, i) === "o") && DIGIT_WORDS.has(at(k, i + 1));
  return digitStep(k, i, afterDigit || opens, true);
}
