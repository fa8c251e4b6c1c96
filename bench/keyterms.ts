/**
 * Keyterms (issue 44) on the embedded engine: word error rate and term recall of
 * PocketSphinx with and without the keyterms a user would name for each clip.
 * - The labelled clips (bench/support/clips.ts): the five LibriVox "Sense and Sensibility"
 *   clips share one list for the book (its names, a few of its rarer words, and names that
 *   are not said in these clips: a term that is never spoken must not be heard); jfk.wav
 *   and ldc93s1.wav their own.
 * - espeak-ng sentences naming made-up products no dictionary holds (their
 *   pronunciations come from flite's letter-to-sound rules), in two voices.
 * Term recall: of the keyterms' words in the reference, the share the transcript has
 * (each occurrence counted once, case-insensitively); false terms: keyterm words in the
 * transcript that the reference lacks.
 * Run: ./scripts/bench.sh keyterms   (or npx tsx bench/keyterms.ts)
 */
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { decodeAudio } from "../shared/audio/decode";
import { normaliseWords, wordErrorRate } from "../shared/workers/wer";
import { synthesise } from "../test/support/espeak";
import { labelledClips } from "./support/clips";
import { recordResults } from "./support/results";

const BOOK = ["Dashwood", "Norland", "Elinor", "Marianne", "Willoughby", "prudently", "amiable", "respectable", "disposed"];
const keytermsFor = (name: string) =>
  name.startsWith("sense_and_sensibility") ? BOOK : name === "jfk.wav" ? ["Americans", "fellow"] : name === "ldc93s1.wav" ? ["greasy", "wash water"] : [];

const MADE_UP = [
  { text: "I bought a new Zorblax today.", terms: ["Zorblax"] },
  { text: "Call the Zorblax team now.", terms: ["Zorblax"] },
  { text: "Please restart the Fentrix server before noon.", terms: ["Fentrix"] },
  { text: "Our Vexomar license expires in June.", terms: ["Vexomar"] },
];

const labelled = await labelledClips();
const spoken = await Promise.all(
  MADE_UP.flatMap((s) =>
    ["en-us+f2", "en-us+m3"].map(async (voice) => ({
      name: `espeak ${voice} "${s.text}"`,
      ref: s.text,
      pcm: (await decodeAudio(await synthesise(s.text, { voice, wordsPerMinute: 130 }))).pcm,
      keyterms: s.terms,
    })),
  ),
);
const clips = [...labelled.map((c) => ({ ...c, keyterms: keytermsFor(c.name) })), ...spoken];

/** Occurrences of the keyterms' words in `reference` that `hypothesis` has, and keyterm words the hypothesis has beyond the reference's. */
function termRecall(reference: string, hypothesis: string, keyterms: string[]) {
  const termWords = new Set(keyterms.flatMap((t) => normaliseWords(t)));
  const count = (words: string[]) => words.filter((w) => termWords.has(w)).reduce((m, w) => m.set(w, (m.get(w) ?? 0) + 1), new Map<string, number>());
  const inRef = count(normaliseWords(reference));
  const inHyp = count(normaliseWords(hypothesis));
  let expected = 0;
  let found = 0;
  let extra = 0;
  for (const [w, n] of inRef) (expected += n), (found += Math.min(n, inHyp.get(w) ?? 0));
  for (const [w, n] of inHyp) extra += Math.max(0, n - (inRef.get(w) ?? 0));
  return { expected, found, extra };
}

const engine = await createPocketsphinxEngine({ processes: 1 });
type Tally = { errors: number; words: number; expected: number; found: number; extra: number };
const zero = (): Tally => ({ errors: 0, words: 0, expected: 0, found: 0, extra: 0 });
const totals = { labelled: { without: zero(), with: zero() }, madeUp: { without: zero(), with: zero() } };
console.log("clip | WER without → with | term recall without → with | false terms without → with");
for (const c of clips) {
  const group = c.name.startsWith("espeak") ? totals.madeUp : totals.labelled;
  const row: string[] = [];
  const runs = [];
  for (const mode of ["without", "with"] as const) {
    const r = await engine.transcribe({ pcm: c.pcm, ...(mode === "with" ? { keyterms: c.keyterms } : {}) });
    const w = wordErrorRate(c.ref, r.text);
    const t = termRecall(c.ref, r.text, c.keyterms);
    const g = group[mode];
    g.errors += w.errors;
    g.words += w.referenceWords;
    g.expected += t.expected;
    g.found += t.found;
    g.extra += t.extra;
    runs.push({ w, t, text: r.text });
  }
  const [a, b] = runs as [(typeof runs)[0], (typeof runs)[0]];
  row.push(`${(a.w.errors / a.w.referenceWords).toFixed(3)} → ${(b.w.errors / b.w.referenceWords).toFixed(3)}`, `${a.t.found}/${a.t.expected} → ${b.t.found}/${b.t.expected}`, `${a.t.extra} → ${b.t.extra}`);
  console.log(`${c.name.slice(0, 60)} | ${row.join(" | ")}\n    without: ${a.text}\n    with:    ${b.text}`);
}
await engine.close();

const summary = (label: string, t: { without: Tally; with: Tally }) => {
  const wer = (x: Tally) => x.errors / x.words;
  const recall = (x: Tally) => (x.expected ? x.found / x.expected : 0);
  console.log(
    `${label}: WER ${wer(t.without).toFixed(3)} → ${wer(t.with).toFixed(3)}; term recall ${t.without.found}/${t.without.expected} → ${t.with.found}/${t.with.expected}; false terms ${t.without.extra} → ${t.with.extra}`,
  );
  return { set: label, wer_without: wer(t.without), wer_with: wer(t.with), recall_without: recall(t.without), recall_with: recall(t.with), false_terms_without: t.without.extra, false_terms_with: t.with.extra };
};
const rows = [summary("labelled clips", totals.labelled), summary("made-up terms (espeak-ng)", totals.madeUp)];
const file = recordResults("keyterms", rows);
if (file) console.log(`results: ${file}`);
