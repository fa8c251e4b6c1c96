import { doubleMetaphone } from "double-metaphone";

/**
 * The embedded reviewer's matcher: pure functions, no I/O. It corrects what a small
 * engine gets wrong and the job already knows: the names and domain terms in the job's
 * `metadata` and `prompt`. A term spoken clearly but missing from the engine's language
 * model comes out as similar-sounding words ("guess would" for "Dashwood", "met for
 * men" for "metformin"), so every word n-gram of a segment is compared with every term
 * by how it sounds:
 *
 * - phonemes from the CMU pronouncing dictionary (the same lexicon family PocketSphinx
 *   decodes with), compared by an edit distance whose substitution costs follow
 *   phonetic classes (a vowel for a vowel, /s/ for /sh/, /g/ for /d/ are cheap) —
 *   Double Metaphone alone scores real recognizer confusions no higher than unrelated
 *   words (measured: "guess would"/"dashwood" 0.25, "cannot"/"kennedy" 1.0);
 * - Double Metaphone codes plus letter edit distance for a term with no dictionary
 *   pronunciation (a new drug, a rare surname), held to a higher bar.
 *
 * Sound alone does not tell a misheard term from a right word that merely sounds a
 * little like one (measured, docs/jobs.md): the reviewer applies a span only after the
 * slice's audio confirms it (review-acoustic.ts), and below `APPLY_CONFIDENCE` nothing
 * is applied. A span never swallows another vocabulary word, and a span already spelled
 * as the term is left alone.
 */

/** Default floor of candidateSpans and annotateSegments (sound similarity). */
const REPORT_CONFIDENCE = 0.7;
/** Stage 2 applies annotations from here up; below it the reviewer changes nothing. */
export const APPLY_CONFIDENCE = 0.8;
/** Bounds the work: at most this many terms, each at most MAX_TERM_WORDS words. */
const MAX_TERMS = 500;
const MAX_TERM_WORDS = 4;
/** A term needs this many letters; shorter ones sound like too many common words. */
const MIN_TERM_LETTERS = 4;
const SINGLE_WORD_PENALTY = 0.1;

export type Pronounce = (word: string) => string[][] | undefined;

export interface VocabularyTerm {
  /** As written in the metadata or prompt: what a correction inserts. */
  text: string;
  /** Normalized words (lower case, letters and apostrophes). */
  words: string[];
}

export interface Annotation {
  segment_id: number;
  /** Word span [start_word, end_word) in the segment's whitespace-separated words. */
  start_word: number;
  end_word: number;
  original: string;
  suggestion: string;
  reason: string;
  confidence: number;
}

export interface ReviewSegment {
  id: number;
  text: string;
}

// Function words never become terms: a prompt's "the" or "about" must not attract spans.
const STOPWORDS = new Set(
  (
    "a an and are as at be been but by can could did do does for from had has have he her his how i if in into is it its " +
    "just may me might more most my no not of on or our out over she should so some such than that the their them then " +
    "there these they this those to too under until up very was we were what when where which while who whom why will " +
    "with would you your all about above after again against also any because before being below between both down during " +
    "each few further here itself once only other own same through also yes okay"
  ).split(" "),
);

export const normalizeWord = (w: string) => w.toLowerCase().replace(/[^a-z']/g, "").replace(/^'+|'+$/g, "");
const letters = (words: string[]) => words.join("").replace(/'/g, "");

function addTerm(terms: Map<string, VocabularyTerm>, raw: string): void {
  const text = raw.trim().replace(/\s+/g, " ");
  const words = text.split(" ").map(normalizeWord).filter(Boolean);
  if (words.length === 0 || words.length > MAX_TERM_WORDS || /\d/.test(text)) return;
  if (words.length === 1 && STOPWORDS.has(words[0]!)) return;
  if (letters(words).length < MIN_TERM_LETTERS) return;
  const key = words.join(" ");
  if (!terms.has(key)) terms.set(key, { text: text.replace(/^[^\p{L}]+|[^\p{L}]+$/gu, ""), words });
}

/**
 * Every term the job carries: each string in `metadata` (at any depth, split at commas,
 * semicolons and line breaks; a multi-word phrase also lends its longer words) and each
 * content word of `prompt`; `keyterms` count as metadata strings do.
 */
export function vocabularyOf(metadata: Record<string, unknown> | undefined, prompt: string | undefined, keyterms?: readonly string[]): VocabularyTerm[] {
  const terms = new Map<string, VocabularyTerm>();
  const visit = (value: unknown, depth: number): void => {
    if (depth > 8 || terms.size >= MAX_TERMS) return;
    if (typeof value === "string") {
      for (const phrase of value.split(/[,;\n]+/)) {
        addTerm(terms, phrase);
        const words = phrase.trim().split(/\s+/);
        if (words.length > 1) for (const w of words) if (normalizeWord(w).length >= 5) addTerm(terms, w);
      }
    } else if (Array.isArray(value)) {
      for (const v of value) visit(v, depth + 1);
    } else if (value && typeof value === "object") {
      for (const v of Object.values(value)) visit(v, depth + 1);
    }
  };
  visit(metadata ?? {}, 0);
  visit(keyterms ?? [], 0);
  for (const w of (prompt ?? "").split(/[^\p{L}']+/u)) if (terms.size < MAX_TERMS) addTerm(terms, w);
  return [...terms.values()].slice(0, MAX_TERMS);
}

// ---------------------------------------------------------------- phonetic distance

const VOWELS = new Set(["AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"]);
// Consonant classes; a pair inside one class is a cheap substitution, a listed pair cheaper.
const CLASSES: string[][] = [
  ["P", "B", "T", "D", "K", "G"],
  ["F", "V", "TH", "DH", "S", "Z", "SH", "ZH", "HH"],
  ["CH", "JH", "SH", "ZH"],
  ["M", "N", "NG"],
  ["L", "R", "W", "Y"],
];
const CLOSE = new Set(["P B", "T D", "K G", "F V", "TH DH", "S Z", "SH ZH", "S SH", "Z ZH", "CH JH", "T TH", "D DH", "M N", "N NG", "ER R", "F TH", "V DH", "CH SH", "JH ZH"].flatMap((p) => [p, p.split(" ").reverse().join(" ")]));

function substitution(a: string, b: string): number {
  if (a === b) return 0;
  const av = VOWELS.has(a);
  const bv = VOWELS.has(b);
  if (av && bv) return 0.3;
  if (CLOSE.has(`${a} ${b}`)) return 0.25;
  if (av !== bv) return a === "ER" || b === "ER" ? 0.6 : 1;
  return CLASSES.some((c) => c.includes(a) && c.includes(b)) ? 0.5 : 1;
}
// Unstressed vowels and /h/ come and go between a recognizer's words; consonants less so.
const indel = (p: string) => (p === "HH" ? 0.4 : VOWELS.has(p) ? 0.5 : 0.8);
const EDGE_COST = 0.3;

/**
 * Weighted edit distance between heard phonemes `a` and a term's phonemes `b`. Up to
 * `lead` phonemes at the start of `a` and `trail` at its end may go unmatched at
 * EDGE_COST each: a recognizer moves word boundaries, so the first and last heard words
 * often carry a sound of their neighbours ("until this blows" for "an ill disposed").
 */
function phonemeDistance(a: string[], b: string[], lead = 0, trail = 0): number {
  let prev = new Array<number>(b.length + 1);
  prev[0] = 0;
  for (let j = 1; j <= b.length; j++) prev[j] = prev[j - 1]! + indel(b[j - 1]!);
  let best = a.length <= trail ? prev[b.length]! + a.length * EDGE_COST : Infinity;
  for (let i = 1; i <= a.length; i++) {
    const cur = new Array<number>(b.length + 1);
    cur[0] = i <= lead ? i * EDGE_COST : prev[0]! + indel(a[i - 1]!);
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + indel(a[i - 1]!), cur[j - 1]! + indel(b[j - 1]!), prev[j - 1]! + substitution(a[i - 1]!, b[j - 1]!));
    }
    prev = cur;
    if (a.length - i <= trail) best = Math.min(best, cur[b.length]! + (a.length - i) * EDGE_COST);
  }
  return best;
}

function levenshtein(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length]!;
}

const similarity = (distance: number, a: number, b: number) => Math.max(0, 1 - distance / Math.max(a, b, 1));

interface Pronunciation {
  phones: string[];
  /** Phonemes of the first and of the last word. */
  first: number;
  last: number;
}

/** Every pronunciation of a word sequence (the first two variants of each word), or undefined if a word has none. */
function pronunciations(words: string[], pronounce: Pronounce): Pronunciation[] | undefined {
  let out: Pronunciation[] = [{ phones: [], first: 0, last: 0 }];
  for (const [i, w] of words.entries()) {
    const variants = pronounce(w);
    if (!variants?.length) return undefined;
    out = out
      .flatMap((p) => variants.slice(0, 2).map((v) => ({ phones: [...p.phones, ...v], first: i === 0 ? v.length : p.first, last: v.length })))
      .slice(0, 8);
  }
  return out;
}

/**
 * How much `heard` sounds like `term`, in [0, 1]; the reason names the evidence. One
 * real word heard for another one-word term (the engine had both in its lexicon and
 * chose the heard one) needs near-identical sound: SINGLE_WORD_PENALTY is taken off.
 */
function soundsLike(heard: string[], term: string[], pronounce: Pronounce): { score: number; reason: string } {
  const heardLetters = letters(heard);
  const termLetters = letters(term);
  const spelling = similarity(levenshtein(heardLetters, termLetters), heardLetters.length, termLetters.length);
  const h = pronunciations(heard, pronounce);
  const t = pronunciations(term, pronounce);
  if (h && t) {
    let best = 0;
    for (const x of h) {
      // Only a span of several words lends its edge words' sounds to the neighbours.
      const lead = heard.length > 1 ? Math.floor(x.first / 2) : 0;
      const trail = heard.length > 1 ? Math.floor(x.last / 2) : 0;
      for (const y of t) best = Math.max(best, similarity(phonemeDistance(x.phones, y.phones, lead, trail), x.phones.length, y.phones.length));
    }
    const penalty = heard.length === 1 && term.length === 1 ? SINGLE_WORD_PENALTY : 0;
    const reason = `sounds like "${term.join(" ")}" (phoneme similarity ${best.toFixed(2)}${penalty ? ", one word for another" : ""})`;
    return { score: Math.max(0, best - penalty), reason };
  }
  // No dictionary pronunciation: Double Metaphone codes and spelling must both agree.
  const hc = doubleMetaphone(heardLetters);
  const tc = doubleMetaphone(termLetters);
  let codes = 0;
  for (const x of hc) for (const y of tc) if (x && y) codes = Math.max(codes, similarity(levenshtein(x, y), x.length, y.length));
  if (Math.min(hc[0].length, tc[0].length) < 4) codes = Math.min(codes, 0.75);
  const score = Math.min(codes, 0.5 + spelling / 2);
  return { score, reason: `phonetic code ${tc[0]} ~ ${hc[0]} (code similarity ${codes.toFixed(2)}, spelling ${spelling.toFixed(2)})` };
}

// ---------------------------------------------------------------- stage 1 and 2

function sharesStem(word: string, termKey: string): boolean {
  let p = 0;
  while (p < word.length && p < termKey.length && word[p] === termKey[p]) p++;
  return p >= 4 && p >= 0.6 * termKey.length;
}

const round2 = (x: number) => Math.round(x * 100) / 100;

/**
 * Every span of the given segments that sounds like a term from `floor` up, overlapping
 * ones included (the evaluation filters these by other evidence before resolving).
 */
export function candidateSpans(segments: ReviewSegment[], vocabulary: VocabularyTerm[], pronounce: Pronounce, floor = REPORT_CONFIDENCE): Annotation[] {
  const vocabularyWords = new Set(vocabulary.flatMap((t) => t.words));
  const candidates: Annotation[] = [];
  for (const segment of segments) {
    const raw = segment.text.split(/\s+/).filter(Boolean);
    const words = raw.map(normalizeWord);
    for (const term of vocabulary) {
      const termKey = letters(term.words);
      const maxN = Math.min(term.words.length + 2, words.length);
      for (let start = 0; start < words.length; start++) {
        for (let n = 1; n <= maxN && start + n <= words.length; n++) {
          const heard = words.slice(start, start + n);
          if (heard.some((w) => w === "")) break;
          // Function words alone are what an engine gets right most often ("can do" is not "Kennedy").
          if (heard.every((w) => STOPWORDS.has(w))) continue;
          const heardKey = letters(heard);
          if (heardKey === termKey) continue;
          // Never swallow another term's word: "John" in "john guess would" stays John.
          if (heard.some((w) => vocabularyWords.has(w) && !term.words.includes(w))) continue;
          // A heard word sharing most of the term's stem is a related real word ("Americans"
          // for "Americana", "married" for "Marriott"): the engine heard that word, leave it.
          if (heard.some((w) => sharesStem(w, termKey))) continue;
          // A span that is much longer or shorter than the term cannot sound like it.
          const ratio = heardKey.length / termKey.length;
          if (ratio < 0.5 || ratio > 2) continue;
          const { score, reason } = soundsLike(heard, term.words, pronounce);
          if (score < floor) continue;
          candidates.push({
            segment_id: segment.id,
            start_word: start,
            end_word: start + n,
            original: raw.slice(start, start + n).join(" "),
            suggestion: term.text,
            reason,
            confidence: round2(score),
          });
        }
      }
    }
  }
  return candidates;
}

const byConfidence = (a: Annotation, b: Annotation) => b.confidence - a.confidence || a.end_word - a.start_word - (b.end_word - b.start_word);

/**
 * Per segment, best first (by `rank`; default: higher confidence, then the shorter
 * span), a candidate overlapping one already taken is dropped; in segment and word order.
 */
export function resolveOverlaps<A extends Annotation>(candidates: A[], rank: (a: A, b: A) => number = byConfidence): A[] {
  const bySegment = new Map<number, A[]>();
  for (const c of candidates) bySegment.set(c.segment_id, [...(bySegment.get(c.segment_id) ?? []), c]);
  const out: A[] = [];
  for (const group of bySegment.values()) {
    group.sort(rank);
    const taken: A[] = [];
    for (const c of group) {
      if (taken.some((t) => c.start_word < t.end_word && t.start_word < c.end_word)) continue;
      taken.push(c);
    }
    out.push(...taken.sort((a, b) => a.start_word - b.start_word));
  }
  return out;
}

/**
 * The matcher's own view by sound alone: the best non-overlapping spans from
 * REPORT_CONFIDENCE up (the reviewer instead checks candidates against the audio,
 * review-acoustic.ts).
 */
export const annotateSegments = (segments: ReviewSegment[], vocabulary: VocabularyTerm[], pronounce: Pronounce): Annotation[] =>
  resolveOverlaps(candidateSpans(segments, vocabulary, pronounce));

/** The segment's text with the given non-overlapping annotations applied (punctuation at the span's edges kept). */
export function applyToText(text: string, annotations: Annotation[]): string {
  const raw = text.split(/\s+/).filter(Boolean);
  const sorted = [...annotations].sort((a, b) => b.start_word - a.start_word);
  for (const a of sorted) {
    if (a.end_word > raw.length || a.start_word >= a.end_word) continue;
    const lead = /^[^\p{L}\p{N}']*/u.exec(raw[a.start_word]!)![0];
    const trail = /[^\p{L}\p{N}']*$/u.exec(raw[a.end_word - 1]!)![0];
    raw.splice(a.start_word, a.end_word - a.start_word, `${lead}${a.suggestion}${trail}`);
  }
  return raw.join(" ");
}

/** Stage 2: the confident annotations, for applyToText per segment. */
export const confidentAnnotations = (annotations: Annotation[], threshold = APPLY_CONFIDENCE) => annotations.filter((a) => a.confidence >= threshold);

let pronouncer: Promise<Pronounce> | undefined;

/**
 * The CMU pronouncing dictionary as a Pronounce function (stress marks dropped). Loaded
 * once per process on first use (about 4.7 MB of source), not at start: most
 * processes never review.
 */
export function loadPronouncer(): Promise<Pronounce> {
  pronouncer ??= import("cmu-pronouncing-dictionary").then(({ dictionary }) => {
    const cache = new Map<string, string[][] | undefined>();
    return (word: string) => {
      if (cache.has(word)) return cache.get(word);
      const variants: string[][] = [];
      for (let i = 1; i <= 4; i++) {
        const entry = dictionary[i === 1 ? word : `${word}(${i})`];
        if (entry === undefined) break;
        variants.push(entry.replace(/\d/g, "").split(" "));
      }
      const found = variants.length ? variants : undefined;
      if (cache.size > 50_000) cache.clear();
      cache.set(word, found);
      return found;
    };
  });
  return pronouncer;
}
