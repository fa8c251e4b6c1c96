import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAudio } from "../shared/audio/decode";
import { normaliseWords } from "../shared/workers/wer";
import type { TranscriptionEngine } from "../shared/workers/types";
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { APPLY_GAIN, annotationsFrom, checkCandidates, createAligner, type AcousticEvidence, type Aligner, type TimedSegment } from "../services/jobs/review-acoustic";
import { applyToText, confidentAnnotations, loadPronouncer, vocabularyOf, type Pronounce } from "../services/jobs/review-embedded";
import { fixturePath } from "./support/fixtures";

// The embedded reviewer against what the embedded engine really writes: each clip of
// real speech is transcribed by PocketSphinx here, then reviewed with a vocabulary
// as a job's metadata would carry it. Per clip, `terms` are the reference words the
// engine got wrong, derived by aligning its output (PocketSphinx 0.8, Debian en-us,
// deterministic) with the reference: each run of wrong reference words, split at
// function words, keeping runs with a word of 4+ letters. The test re-derives them
// and fails if this list drifts from the engine's output. `distractors` are terms
// of the same domain that were not said; they were chosen before any review ran.
// `more` are further distractors of the same kind, chosen after the acoustic check was
// tuned on the first set and before it ran on them: a larger vocabulary, as a job's
// metadata may well carry, measured separately.
// Every candidate span is checked against the clip's audio by the reviewer's own
// aligner (ps-worker's alignment request), exactly as a job's review step does.
const LIBRI = "/usr/share/pocketsphinx/test/data/librivox";
const CLIPS: { file: string; reference: string; terms: string[]; distractors: string[]; more: string[] }[] = [
  {
    file: fixturePath("jfk.wav"),
    reference: "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
    terms: [],
    distractors: ["Kennedy", "inaugural address", "Americana", "Washington", "metformin"],
    more: ["Lyndon Johnson", "Massachusetts", "Boston", "Dallas", "Texas", "Camelot", "Cuba", "Berlin", "Apollo", "Jacqueline", "senator", "president", "democracy", "freedom", "liberty", "citizens", "Congress", "nation"],
  },
  {
    file: fixturePath("ldc93s1.wav"),
    reference: "She had your dark suit in greasy wash water all year.",
    terms: ["dark suit", "greasy wash water"],
    distractors: ["dishwasher", "laundry detergent", "Sheila", "cardiology"],
    more: ["washing machine", "bleach", "stain remover", "tumble dryer", "ironing board", "wardrobe", "jacket", "trousers", "laundromat", "soap", "kitchen", "overalls", "mechanic", "garage", "cotton", "linen"],
  },
  ...[
    { id: "0870", terms: ["Dashwood", "prudently"] },
    { id: "0880", terms: ["ill disposed"] },
    { id: "0890", terms: ["unless", "ill disposed"] },
    { id: "0920", terms: [] },
    { id: "0930", terms: [] },
  ].map(({ id, terms }) => ({
    file: `${LIBRI}/sense_and_sensibility_01_austen_64kb-${id}.wav`,
    reference: "",
    terms,
    distractors: ["Elinor", "Marianne", "Willoughby", "Colonel Brandon", "Norland Park", "Mrs Jennings", "Barton Cottage"],
    more: [
      ...["Fanny", "Harry", "Edward Ferrars", "Lucy Steele", "Margaret", "Sir John Middleton", "Lady Middleton", "Mrs Palmer", "Charlotte", "Devonshire"],
      ...["Sussex", "Cleveland", "Delaford", "London", "Combe Magna", "Allenham", "Exeter", "inheritance", "annuity", "estate"],
    ],
  })),
];

const FUNCTION_WORDS = new Set("a an and as at be but by do for had has have he in is it mister my not of so the them then than to was what you your".split(" "));

/** For each reference word, the index of the hypothesis word it is aligned with as a match, else -1. */
function alignMatches(ref: string[], hyp: string[]): { refMatch: number[]; hypCorrect: boolean[] } {
  const d = Array.from({ length: ref.length + 1 }, (_, i) => Array.from({ length: hyp.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= ref.length; i++)
    for (let j = 1; j <= hyp.length; j++) d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (ref[i - 1] === hyp[j - 1] ? 0 : 1));
  const refMatch = ref.map(() => -1);
  const hypCorrect = hyp.map(() => false);
  for (let i = ref.length, j = hyp.length; i > 0 || j > 0; ) {
    if (i > 0 && j > 0 && ref[i - 1] === hyp[j - 1] && d[i]![j] === d[i - 1]![j - 1]) {
      refMatch[i - 1] = j - 1;
      hypCorrect[j - 1] = true;
      i--, j--;
    } else if (i > 0 && j > 0 && d[i]![j] === d[i - 1]![j - 1]! + 1) i--, j--;
    else if (i > 0 && d[i]![j] === d[i - 1]![j]! + 1) i--;
    else j--;
  }
  return { refMatch, hypCorrect };
}

/** The runs of reference words the engine got wrong, split at function words (see above). */
function wrongTerms(ref: string[], refMatch: number[]): string[] {
  const runs: string[][] = [[]];
  ref.forEach((w, i) => {
    if (refMatch[i]! >= 0 || FUNCTION_WORDS.has(w)) runs.push([]);
    else runs.at(-1)!.push(w);
  });
  return runs.filter((r) => r.some((w) => w.length >= 4)).map((r) => r.join(" "));
}

let engine: TranscriptionEngine;
let aligner: Aligner;
let pronounce: Pronounce;
/** Per clip: the text, its timed segments, and the reviewer's evidence for every candidate span, with the distractors and with the larger set. */
const transcripts: { text: string; segments: TimedSegment[]; evidence: AcousticEvidence[]; wider: AcousticEvidence[] }[] = [];

beforeAll(async () => {
  engine = await createPocketsphinxEngine({ processes: 1 });
  aligner = createAligner();
  pronounce = await loadPronouncer();
  for (const clip of CLIPS) {
    if (!clip.reference) {
      const lines = (await readFile(`${LIBRI}/transcription`, "utf8")).split("\n");
      const id = /(\w+-\d+)\.wav$/.exec(clip.file)![1]!;
      clip.reference = lines.find((l) => l.includes(`(${id})`))!.replace(/<\/?s>|\([^)]*\)\s*$/g, "").trim();
    }
    const { pcm } = await decodeAudio(await readFile(clip.file));
    const r = await engine.transcribe({ pcm });
    const segments = r.segments.map((s, id) => ({ id, text: s.text.trim(), start_time: s.start, end_time: s.end })).filter((s) => s.text);
    const check = (terms: string[]) => checkCandidates(segments, vocabularyOf({ known_terms: terms }, undefined), pronounce, async () => ({ pcm, startTime: 0 }), aligner);
    const evidence = await check([...clip.terms, ...clip.distractors]);
    const wider = await check([...clip.terms, ...clip.distractors, ...clip.more]);
    transcripts.push({ text: r.text, segments, evidence, wider });
  }
}, 300_000);

afterAll(async () => {
  await aligner?.close();
  await engine?.close();
});

const show = (r: Outcome) =>
  `${r.applied} applied, ${r.wrongApplied} wrong, recall ${r.recovered + r.missed ? `${(r.recall * 100).toFixed(0)}%` : "-"} (${r.recovered}/${r.recovered + r.missed})`;

describe("embedded reviewer on real PocketSphinx transcripts", () => {
  it("the vocabulary beside this test is what the engine got wrong", () => {
    CLIPS.forEach((clip, k) => {
      const ref = normaliseWords(clip.reference);
      const { refMatch } = alignMatches(ref, normaliseWords(transcripts[k]!.text));
      expect(wrongTerms(ref, refMatch), `${clip.file}: ${transcripts[k]!.text}`).toEqual(clip.terms.map((t) => t.toLowerCase()));
    });
  });

  it("checks every candidate span against the audio", () => {
    const all = transcripts.flatMap((t) => t.evidence);
    expect(all.length).toBeGreaterThan(20);
    expect(all.filter((e) => e.gain === undefined).map((e) => e.annotation.original)).toEqual([]);
  });

  it("changes no correct word and inserts no distractor at its threshold, and recovers at least half of the words the engine got wrong", () => {
    const atThreshold = evaluate(APPLY_GAIN, true);
    for (const g of [400, 200, 0, -100, -200, -300, -400, -500, -600, -800]) console.log(`gain >= ${String(g).padStart(4)}: ${show(evaluate(g, false))}`);
    console.log(`embedded review at gain >= ${APPLY_GAIN}: ${show(atThreshold)}`);
    expect(atThreshold.wrongApplied).toBe(0);
    expect(atThreshold.recall).toBeGreaterThanOrEqual(0.5);
  });
});

describe("with the larger set of distractors", () => {
  it("prints what the same threshold applies, per threshold, and tuned with one clip left out", () => {
    const all = transcripts.flatMap((t) => t.wider);
    expect(all.length).toBeGreaterThan(transcripts.flatMap((t) => t.evidence).length);
    const atThreshold = evaluate(APPLY_GAIN, true, undefined, true);
    for (const g of [400, 200, 120, 0, -100, -200, -300, -400]) console.log(`wider, gain >= ${String(g).padStart(4)}: ${show(evaluate(g, false, undefined, true))}`);
    console.log(`wider vocabulary, embedded review at gain >= ${APPLY_GAIN}: ${show(atThreshold)}`);
    const sum: Outcome = { applied: 0, wrongApplied: 0, recovered: 0, missed: 0, recall: 0 };
    for (const k of CLIPS.keys()) {
      const r = evaluate(tune([...CLIPS.keys()].filter((j) => j !== k), true), false, [k], true);
      sum.applied += r.applied;
      sum.wrongApplied += r.wrongApplied;
      sum.recovered += r.recovered;
      sum.missed += r.missed;
    }
    sum.recall = sum.recovered / (sum.recovered + sum.missed);
    console.log(`wider vocabulary, leave-one-clip-out: ${show(sum)}; tuned on all seven: gain >= ${tune([...CLIPS.keys()], true)}`);
  });
});

describe("the apply threshold tuned on some clips and checked on the others", () => {
  it("prints held-out precision and recall: fixtures against LibriVox both ways, and leave one clip out", () => {
    const lines: string[] = [];
    for (const [trainName, train, testName, test] of [
      ["fixtures", FIXTURE_CLIPS, "librivox", LIBRIVOX_CLIPS],
      ["librivox", LIBRIVOX_CLIPS, "fixtures", FIXTURE_CLIPS],
    ] as const) {
      const gain = tune([...train]);
      lines.push(`tuned on ${trainName} (gain >= ${gain}): ${show(evaluate(gain, false, [...train]))} | held-out ${testName}: ${show(evaluate(gain, false, [...test]))}`);
    }
    const sum: Outcome = { applied: 0, wrongApplied: 0, recovered: 0, missed: 0, recall: 0 };
    for (const k of CLIPS.keys()) {
      const gain = tune([...CLIPS.keys()].filter((j) => j !== k));
      const r = evaluate(gain, false, [k]);
      lines.push(`  clip ${CLIPS[k]!.file.split("/").pop()}: tuned on the other six, gain >= ${gain}: ${show(r)}`);
      sum.applied += r.applied;
      sum.wrongApplied += r.wrongApplied;
      sum.recovered += r.recovered;
      sum.missed += r.missed;
    }
    sum.recall = sum.recovered / (sum.recovered + sum.missed);
    lines.push(`leave-one-clip-out: ${show(sum)}`);
    console.log(lines.join("\n"));
    for (const [k, clip] of CLIPS.entries()) {
      const ref = normaliseWords(clip.reference);
      for (const { annotation: a, gain } of transcripts[k]!.evidence) {
        const said = normaliseWords(a.suggestion).every((w) => ref.includes(w)) && !clip.distractors.includes(a.suggestion);
        console.log(`${said ? "said    " : "not said"} sound ${a.confidence.toFixed(2)} gain ${String(gain).padStart(6)}  "${a.original}" ~ ${a.suggestion}`);
      }
    }
    // Distractors were never said: whatever the tuning, none may be applied held out.
    expect(sum.wrongApplied).toBe(0);
  });
});

const FIXTURE_CLIPS = [0, 1];
const LIBRIVOX_CLIPS = [2, 3, 4, 5, 6];

/**
 * The threshold that recovers most on `clips` with nothing wrong, placed halfway between
 * the lowest gain it must accept and the highest gain that would apply a wrong
 * correction (the widest margin between the two).
 */
function tune(clips: number[], wider = false): number {
  const evidenceOf = (k: number) => (wider ? transcripts[k]!.wider : transcripts[k]!.evidence);
  const gains = [...new Set(clips.flatMap((k) => evidenceOf(k).flatMap((e) => (e.gain === undefined ? [] : [e.gain]))))].sort((a, b) => b - a);
  let best = { recovered: -1, at: Infinity };
  for (const g of gains) {
    const r = evaluate(g, false, clips, wider);
    if (r.wrongApplied > 0) return Math.round((best.at + g) / 2);
    if (r.recovered > best.recovered) best = { recovered: r.recovered, at: g };
  }
  return best.at;
}

interface Outcome {
  applied: number;
  wrongApplied: number;
  recovered: number;
  missed: number;
  recall: number;
}

function evaluate(applyGain: number, log: boolean, clips = CLIPS.map((_, k) => k), wider = false): Outcome {
  let applied = 0;
  let wrongApplied = 0;
  let missed = 0;
  let recovered = 0;
  CLIPS.forEach((clip, k) => {
    if (!clips.includes(k)) return;
    const { segments } = transcripts[k]!;
    const evidence = wider ? transcripts[k]!.wider : transcripts[k]!.evidence;
    const distractors = wider ? [...clip.distractors, ...clip.more] : clip.distractors;
    const ref = normaliseWords(clip.reference);
    const raw = alignMatches(ref, normaliseWords(segments.map((s) => s.text).join(" ")));
    const annotations = annotationsFrom(evidence, applyGain);
    const confident = confidentAnnotations(annotations);
    const reviewed = segments.map((s) => applyToText(s.text, confident.filter((a) => a.segment_id === s.id)));

    // Precision: every applied span held only wrong words, and its suggestion is said here.
    let offset = 0;
    for (const s of segments) {
      for (const a of confident.filter((c) => c.segment_id === s.id)) {
        applied++;
        const span = raw.hypCorrect.slice(offset + a.start_word, offset + a.end_word);
        const said = normaliseWords(a.suggestion).every((w) => ref.includes(w));
        const ok = span.every((c) => !c) && said && !distractors.includes(a.suggestion);
        if (!ok) wrongApplied++;
        if (log) console.log(`${ok ? "ok   " : "WRONG"} ${a.confidence.toFixed(2)} "${a.original}" -> "${a.suggestion}"  (${clip.file.split("/").pop()}) ${a.reason}`);
      }
      offset += normaliseWords(s.text).length;
    }
    if (log) for (const a of annotations.filter((x) => !confident.includes(x))) console.log(`kept  ${a.confidence.toFixed(2)} "${a.original}" ~ "${a.suggestion}"  ${a.reason}`);

    // Recall: reference words of the vocabulary the engine got wrong, right after review.
    const after = alignMatches(ref, normaliseWords(reviewed.join(" ")));
    const vocabularyWords = new Set(clip.terms.flatMap((t) => normaliseWords(t)));
    ref.forEach((w, i) => {
      if (!vocabularyWords.has(w) || raw.refMatch[i]! >= 0) return;
      if (after.refMatch[i]! >= 0) recovered++;
      else missed++;
    });
  });
  return { applied, wrongApplied, recovered, missed, recall: recovered / (recovered + missed) };
}
