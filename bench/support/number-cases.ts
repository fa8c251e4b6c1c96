/**
 * The labelled set for numbers and redaction (issue 27, bench/formatting.ts): sentences
 * generated from a seed, per number class and per entity type, each with how it should
 * read and which words are which entity. Deterministic: the same seed gives the same set.
 */

export interface NumberCase {
  /** Number class ("phone-7", "room", "year", …) or entity case ("card", "ssn", "negative", …). */
  kind: string;
  spoken: string;
  /** How smart format should write it (number cases only). */
  formatted?: string;
  /** The entities in the spoken words: label and the words it covers. */
  entities: { label: string; words: string }[];
  /** The `redact` values the case is run with (none: a formatting case). */
  redact: ("pci" | "ssn" | "phone" | "email" | "numbers" | "pii")[];
}

const WORDS = "zero one two three four five six seven eight nine".split(" ");
const TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split(" ");
const TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split(" ");

/** A small seeded generator (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Digits spoken one by one; `style` mixes in "oh" for zero (not first) and "double" for a repeated digit. */
function speakDigits(digits: string, r: () => number, style = true): string {
  const out: string[] = [];
  for (let i = 0; i < digits.length; i++) {
    const d = Number(digits[i]);
    if (style && i + 1 < digits.length && digits[i + 1] === digits[i] && (i + 2 >= digits.length || digits[i + 2] !== digits[i]) && r() < 0.5) {
      out.push("double", WORDS[d]!);
      i++;
    } else out.push(d === 0 && i > 0 && style && r() < 0.5 ? "oh" : WORDS[d]!);
  }
  return out.join(" ");
}

const randomDigits = (n: number, r: () => number, first = "123456789") => first[Math.floor(r() * first.length)]! + Array.from({ length: n - 1 }, () => String(Math.floor(r() * 10))).join("");

function luhnComplete(body: string): string {
  for (let d = 0; d <= 9; d++) {
    const s = body + d;
    let sum = 0;
    for (let i = 0; i < s.length; i++) {
      let x = Number(s[s.length - 1 - i]);
      if (i % 2 === 1) x = x * 2 > 9 ? x * 2 - 9 : x * 2;
      sum += x;
    }
    if (sum % 10 === 0) return s;
  }
  throw new Error("unreachable");
}

function spokenYear(y: number): string {
  const hi = Math.floor(y / 100);
  const lo = y % 100;
  if (y >= 2000 && y < 2010) return `two thousand${lo ? ` ${WORDS[lo]}` : ""}`;
  const pair = (n: number) => (n < 10 ? `oh ${WORDS[n]}` : n < 20 ? TEENS[n - 10]! : `${TENS[Math.floor(n / 10) - 2]}${n % 10 ? ` ${WORDS[n % 10]}` : ""}`);
  return `${hi < 20 ? TEENS[hi - 10] : "twenty"} ${lo === 0 ? "hundred" : pair(lo)}`;
}

const cap = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

/** `perClass` cases of every number class and entity type. */
export function numberCases(perClass = 40, seed = 27): NumberCase[] {
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  const cases: NumberCase[] = [];
  for (let n = 0; n < perClass; n++) {
    const p7 = randomDigits(7, r, "23456789");
    const lead = pick(["my number is", "call me on", "you can reach me at"]);
    cases.push({ kind: "phone-7", spoken: `${lead} ${speakDigits(p7, r)}`, formatted: `${cap(lead)} ${p7.slice(0, 3)}-${p7.slice(3)}.`, entities: [], redact: [] });
    const p10 = randomDigits(10, r, "23456789");
    cases.push({ kind: "phone-10", spoken: `call me at ${speakDigits(p10, r)}`, formatted: `Call me at ${p10.slice(0, 3)}-${p10.slice(3, 6)}-${p10.slice(6)}.`, entities: [], redact: [] });
    const intl = `44${randomDigits(10, r)}`;
    cases.push({ kind: "international", spoken: `dial plus ${speakDigits(intl, r, false)} please`, formatted: `Dial +${intl} please.`, entities: [], redact: [] });
    const code = randomDigits(4 + Math.floor(r() * 3), r);
    cases.push({ kind: "code", spoken: `the code is ${speakDigits(code, r)}`, formatted: `The code is ${code}.`, entities: [], redact: [] });
    const room = randomDigits(3, r);
    const roomWord = pick(["room", "flight", "gate", "extension"]);
    cases.push({ kind: "room-flight", spoken: `${roomWord} ${speakDigits(room, r)}`, formatted: `${cap(roomWord)} ${room}.`, entities: [], redact: [] });
    const year = 1900 + Math.floor(r() * 125);
    const yearLead = pick(["the year", "in", "since", "born in"]);
    cases.push({ kind: "year", spoken: `${yearLead} ${spokenYear(year)}`, formatted: `${cap(yearLead)} ${year}.`, entities: [], redact: [] });
    const whole = 1 + Math.floor(r() * 9);
    const frac = String(Math.floor(r() * 100)).padStart(1, "0");
    cases.push({ kind: "decimal", spoken: `it grew ${WORDS[whole]} point ${speakDigits(frac, r, false)} times`, formatted: `It grew ${whole}.${frac} times.`, entities: [], redact: [] });
  }
  for (let n = 0; n < perClass; n++) {
    const prefix = pick(["4", "51", "37", "6011"]);
    const card = luhnComplete(prefix + randomDigits(16, r).slice(0, (prefix === "37" ? 15 : 16) - prefix.length - 1));
    const spokenCard = speakDigits(card, r);
    cases.push({ kind: "card", spoken: `my card number is ${spokenCard} thank you`, entities: [{ label: "CARD_NUMBER", words: spokenCard }], redact: ["pci"] });
    const exp = `${String(1 + Math.floor(r() * 12)).padStart(2, "0")}${20 + Math.floor(r() * 10)}`;
    const cvv = randomDigits(3, r);
    const e = speakDigits(exp, r, false).replace(/^zero/, "oh");
    cases.push({ kind: "card-context", spoken: `it expires ${e} and the security code is ${speakDigits(cvv, r, false)}`, entities: [{ label: "CARD_EXPIRY", words: e }, { label: "CARD_SECURITY_CODE", words: speakDigits(cvv, r, false) }], redact: ["pci"] });
    const bad = randomDigits(16, r, "4");
    if (!isLuhn(bad)) cases.push({ kind: "card-invalid", spoken: `the order number is ${speakDigits(bad, r, false)}`, entities: [], redact: ["pci"] });
    const ssn = randomDigits(9, r);
    const spokenSsn = speakDigits(ssn, r);
    cases.push({ kind: "ssn", spoken: `my social security number is ${spokenSsn}`, entities: [{ label: "SSN", words: spokenSsn }], redact: ["ssn"] });
    const p = randomDigits(10, r, "23456789");
    const spokenPhone = speakDigits(p, r);
    cases.push({ kind: "phone", spoken: `please call ${spokenPhone} tomorrow`, entities: [{ label: "PHONE_NUMBER", words: spokenPhone }], redact: ["phone"] });
    const name = pick(["john", "mary", "alex", "sam", "priya", "chen"]);
    const email = `${name}${r() < 0.5 ? ` dot ${pick(["smith", "jones", "lee"])}` : ""} at ${pick(["example", "gmail", "acme"])} dot ${pick(["com", "org", "net", "io"])}`;
    cases.push({ kind: "email", spoken: `send it to ${email} today`, entities: [{ label: "EMAIL", words: email }], redact: ["email"] });
    cases.push({
      kind: "negative",
      spoken: pick(["meet me at the office at three", "we had twenty five people in room four", "one of the two cars", "look at the dog", "i was born in nineteen ninety nine", "it costs three hundred dollars"]),
      entities: [],
      redact: ["pci", "ssn", "phone", "email"],
    });
  }
  return cases;
}

function isLuhn(s: string): boolean {
  return luhnComplete(s.slice(0, -1)) === s;
}

/** Where Debian's pocketsphinx-testdata keeps its recordings (16 kHz 16-bit mono raw). */
export const RECORDED_DIR = "/usr/share/pocketsphinx/test/data";

/**
 * Real recordings of dictated digits in Debian's pocketsphinx-testdata. dhd.2934z.raw is
 * a TIDIGITS utterance, named by its digits ("z" is zero); numbers.raw's words are what
 * PocketSphinx's TIDIGITS models (tidigits/hmm, both its n-gram and its digit grammar)
 * decode it as, which the general en-us model agrees with in sound ("thirty three four or
 * six ninety two"); the pocketsphinx sources use it without an expected transcript.
 */
export const recordedCases: (NumberCase & { file: string })[] = [
  { file: "numbers.raw", kind: "recorded", spoken: "three three four six nine eight two", formatted: "334-6982.", entities: [{ label: "NUMBER", words: "three three four six nine eight two" }], redact: ["numbers"] },
  { file: "tidigits/dhd.2934z.raw", kind: "recorded", spoken: "two nine three four zero", formatted: "29340.", entities: [{ label: "NUMBER", words: "two nine three four zero" }], redact: ["numbers"] },
];
