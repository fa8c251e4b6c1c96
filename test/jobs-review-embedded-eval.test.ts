import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAudio } from "../shared/audio/decode";
import { normaliseWords } from "../shared/workers/wer";
import type { TranscriptionEngine } from "../shared/workers/types";
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import {
  APPLY_CONFIDENCE,
  annotateSegments,
  applyToText,
  candidateSpans,
  confidentAnnotations,
  loadPronouncer,
  resolveOverlaps,
  vocabularyOf,
  type Annotation,
  type Pronounce,
} from "../services/jobs/review-embedded";
import { fixturePath } from "./support/fixtures";

// The embedded reviewer against what the embedded engine really writes: each clip of
// real speech is transcribed by PocketSphinx here, then reviewed with a vocabulary
// as a job's metadata would carry it. Per clip, `terms` are the reference words the
// engine got wrong, derived by aligning its output (PocketSphinx 0.8, Debian en-us,
// deterministic) with the reference: each run of wrong reference words, split at
// function words, keeping runs with a word of 4+ letters. The test re-derives them
// and fails if this list drifts from the engine's output. `distractors` are terms
// of the same domain that were not said; they were chosen before any review ran.
const LIBRI = "/usr/share/pocketsphinx/test/data/librivox";
const CLIPS: { file: string; reference: string; terms: string[]; distractors: string[] }[] = [
  {
    file: fixturePath("jfk.wav"),
    reference: "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
    terms: [],
    distractors: ["Kennedy", "inaugural address", "Americana", "Washington", "metformin"],
  },
  {
    file: fixturePath("ldc93s1.wav"),
    reference: "She had your dark suit in greasy wash water all year.",
    terms: ["dark suit", "greasy wash water"],
    distractors: ["dishwasher", "laundry detergent", "Sheila", "cardiology"],
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
let pronounce: Pronounce;
/** Per clip: the text, its segments, and per segment word the engine's posterior and the language model's fit. */
const transcripts: { text: string; segments: string[]; probability: number[][]; lmFit: number[][] }[] = [];

beforeAll(async () => {
  engine = await createPocketsphinxEngine({ processes: 2 });
  pronounce = await loadPronouncer();
  for (const clip of CLIPS) {
    if (!clip.reference) {
      const lines = (await readFile(`${LIBRI}/transcription`, "utf8")).split("\n");
      const id = /(\w+-\d+)\.wav$/.exec(clip.file)![1]!;
      clip.reference = lines.find((l) => l.includes(`(${id})`))!.replace(/<\/?s>|\([^)]*\)\s*$/g, "").trim();
    }
    const { pcm } = await decodeAudio(await readFile(clip.file));
    const r = await engine.transcribe({ pcm });
    const segments = r.segments.map((s) => s.text.trim()).filter(Boolean);
    // PocketSphinx's words are its segments' words in order; each carries its posterior.
    let w = 0;
    const probability = segments.map((text) => text.split(/\s+/).map(() => r.words[w++]?.probability ?? Number.NaN));
    transcripts.push({ text: r.text, segments, probability, lmFit: lmFit(segments) });
  }
}, 180_000);

afterAll(async () => {
  await engine?.close();
});

describe("embedded reviewer on real PocketSphinx transcripts", () => {
  it("the vocabulary beside this test is what the engine got wrong", () => {
    CLIPS.forEach((clip, k) => {
      const ref = normaliseWords(clip.reference);
      const { refMatch } = alignMatches(ref, normaliseWords(transcripts[k]!.text));
      expect(wrongTerms(ref, refMatch), `${clip.file}: ${transcripts[k]!.text}`).toEqual(clip.terms.map((t) => t.toLowerCase()));
    });
  });

  it("changes no correct word and inserts no distractor at its threshold; recall printed per threshold", () => {
    const atThreshold = evaluate(APPLY_CONFIDENCE, true);
    for (const t of [0.85, 0.8, 0.75, 0.72, 0.7]) {
      const r = evaluate(t, false);
      console.log(`threshold ${t.toFixed(2)}: ${r.applied} applied, ${r.wrongApplied} wrong, recall ${(r.recall * 100).toFixed(0)}% (${r.recovered}/${r.recovered + r.missed})`);
    }
    console.log(`embedded review at ${APPLY_CONFIDENCE}: ${atThreshold.applied} corrections applied, ${atThreshold.wrongApplied} wrong; recall ${(atThreshold.recall * 100).toFixed(0)}%`);
    expect(atThreshold.wrongApplied).toBe(0);
    // The issue asks for recall >= 50%; measured here it is far lower (see docs/jobs.md).
    expect(atThreshold.recovered).toBeGreaterThan(0);
  });
});

/**
 * How well each segment word fits its left context under PocketSphinx's own trigram
 * language model: log10 P(w | two words before) − log10 P(w). Below 0 the words do not go
 * together (a recognizer forced onto a term it lacks tends to write such runs: "guess
 * would", "homeless to"); well above 0 they are a common phrase ("country can do"). A
 * tiny helper compiled against Debian's sphinxbase (the engine's build needs the same
 * packages) answers per line.
 */
const LM_FIT_SOURCE = `#include <stdio.h>
#include <string.h>
#include <sphinxbase/ngram_model.h>
#include <sphinxbase/err.h>
int main(int argc, char **argv) {
  err_set_logfp(NULL);
  logmath_t *lm = logmath_init(1.0001, 0, 0);
  ngram_model_t *m = ngram_model_read(NULL, argv[1], NGRAM_AUTO, lm);
  if (!m) return 1;
  char line[8192];
  while (fgets(line, sizeof line, stdin)) {
    const char *w[256]; int n = 0;
    for (char *t = strtok(line, " \\t\\r\\n"); t && n < 256; t = strtok(NULL, " \\t\\r\\n")) w[n++] = t;
    for (int i = 1; i < n; i++) {
      const char *h[3]; int k = 0;
      for (int j = i; j >= 0 && k < 3; j--) h[k++] = w[j];
      printf("%s%.3f", i > 1 ? " " : "", logmath_log_to_log10(lm, ngram_prob(m, h, k)) - logmath_log_to_log10(lm, ngram_prob(m, h, 1)));
    }
    printf("\\n");
  }
  return 0;
}
`;
let lmFitBinary: string | undefined;
function lmFit(segments: string[]): number[][] {
  if (!lmFitBinary) {
    const dir = mkdtempSync(join(tmpdir(), "lm-fit-"));
    writeFileSync(join(dir, "lm-fit.c"), LM_FIT_SOURCE);
    const flags = execFileSync("pkg-config", ["--cflags", "--libs", "sphinxbase"]).toString().trim().split(/\s+/);
    execFileSync("cc", ["-O2", "-o", join(dir, "lm-fit"), join(dir, "lm-fit.c"), ...flags, "-lm"]);
    lmFitBinary = join(dir, "lm-fit");
  }
  const input = segments.map((s) => `<s> ${normaliseWords(s).join(" ")}`).join("\n") + "\n";
  const out = execFileSync(lmFitBinary, ["/usr/share/pocketsphinx/model/en-us/en-us.lm.bin"], { input }).toString().split("\n");
  return segments.map((_, i) => out[i]!.trim().split(" ").map(Number));
}

const candidateCache = new Map<number, Annotation[]>();
/** Every span of clip k that sounds like a term of its vocabulary from 0.5 up, overlaps included (computed once). */
function candidatesOf(k: number): Annotation[] {
  const clip = CLIPS[k]!;
  const vocabulary = vocabularyOf({ known_terms: [...clip.terms, ...clip.distractors] }, undefined);
  if (!candidateCache.has(k)) candidateCache.set(k, candidateSpans(transcripts[k]!.segments.map((text, id) => ({ id, text })), vocabulary, pronounce, 0.5));
  return candidateCache.get(k)!;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
interface Evidence {
  sound: number;
  probability: number;
  fit: number;
}
const evidenceOf = (k: number, a: Annotation): Evidence => ({
  sound: a.confidence,
  probability: mean(transcripts[k]!.probability[a.segment_id]!.slice(a.start_word, a.end_word)),
  fit: mean(transcripts[k]!.lmFit[a.segment_id]!.slice(a.start_word, a.end_word)),
});

interface Rule {
  minSound: number;
  maxProbability: number;
  maxFit: number;
}
const FIXTURE_CLIPS = [0, 1];
const LIBRIVOX_CLIPS = [2, 3, 4, 5, 6];

/** The rule of the family that recovers most on `clips` with nothing wrong (then the one applying least, then the strictest on sound). */
function tune(clips: number[], use: { probability: boolean; fit: boolean }): Rule {
  const grid = (from: number, to: number, step: number) => Array.from({ length: Math.round((to - from) / step) + 1 }, (_, i) => Math.round((from + i * step) * 100) / 100);
  let best: { rule: Rule; recovered: number; applied: number } | undefined;
  for (const minSound of grid(0.5, 0.9, 0.02))
    for (const maxProbability of use.probability ? grid(0.1, 1, 0.1) : [1])
      for (const maxFit of use.fit ? [...grid(-1, 2, 0.5), Infinity] : [Infinity]) {
        const rule = { minSound, maxProbability, maxFit };
        const r = evaluateRule(rule, clips);
        if (r.wrongApplied > 0) continue;
        if (!best || r.recovered > best.recovered || (r.recovered === best.recovered && (r.applied < best.applied || (r.applied === best.applied && minSound > best.rule.minSound)))) {
          best = { rule, recovered: r.recovered, applied: r.applied };
        }
      }
  return best!.rule;
}

const evaluateRule = (rule: Rule, clips: number[]) =>
  evaluate(
    (k, a) => {
      const e = evidenceOf(k, a);
      return e.sound >= rule.minSound && e.probability <= rule.maxProbability && e.fit <= rule.maxFit;
    },
    false,
    clips,
  );

describe("other evidence, tuned on one group of clips and checked on the other", () => {
  it("prints held-out precision and recall for sound alone, with the engine's word probability, with the language model's fit, and with both", () => {
    const lines: string[] = [];
    const show = (r: ReturnType<typeof evaluate>) => `${r.applied} applied, ${r.wrongApplied} wrong, recall ${(r.recall * 100).toFixed(0)}% (${r.recovered}/${r.recovered + r.missed})`;
    for (const use of [
      { probability: false, fit: false },
      { probability: true, fit: false },
      { probability: false, fit: true },
      { probability: true, fit: true },
    ]) {
      const name = use.probability && use.fit ? "sound+probability+lm" : use.probability ? "sound+probability" : use.fit ? "sound+lm" : "sound alone";
      for (const [trainName, train, testName, test] of [
        ["fixtures", FIXTURE_CLIPS, "librivox", LIBRIVOX_CLIPS],
        ["librivox", LIBRIVOX_CLIPS, "fixtures", FIXTURE_CLIPS],
      ] as const) {
        const rule = tune([...train], use);
        const fitted = evaluateRule(rule, [...train]);
        const held = evaluateRule(rule, [...test]);
        lines.push(
          `${name.padEnd(22)} tuned on ${trainName} (sound>=${rule.minSound}, p<=${rule.maxProbability}, fit<=${rule.maxFit}): ${show(fitted)} | held-out ${testName}: ${show(held)}`,
        );
        // Tuning can only ever be perfect on the clips it saw.
        expect(fitted.wrongApplied).toBe(0);
      }
    }
    // Leave one clip out: tune on the other six, apply to it; figures summed over the seven.
    for (const use of [
      { probability: false, fit: false },
      { probability: true, fit: false },
      { probability: false, fit: true },
      { probability: true, fit: true },
    ]) {
      const name = use.probability && use.fit ? "sound+probability+lm" : use.probability ? "sound+probability" : use.fit ? "sound+lm" : "sound alone";
      const sum = { applied: 0, wrongApplied: 0, recovered: 0, missed: 0, recall: 0 };
      for (const k of CLIPS.keys()) {
        const r = evaluateRule(tune([...CLIPS.keys()].filter((j) => j !== k), use), [k]);
        sum.applied += r.applied;
        sum.wrongApplied += r.wrongApplied;
        sum.recovered += r.recovered;
        sum.missed += r.missed;
      }
      sum.recall = sum.recovered / (sum.recovered + sum.missed);
      lines.push(`${name.padEnd(22)} leave-one-clip-out: ${show(sum)}`);
      // The ceiling: tuned on all seven and scored on the same seven (over-fitted by construction).
      const all = [...CLIPS.keys()];
      const rule = tune(all, use);
      lines.push(`${name.padEnd(22)} in-sample ceiling (sound>=${rule.minSound}, p<=${rule.maxProbability}, fit<=${rule.maxFit}): ${show(evaluateRule(rule, all))}`);
    }
    console.log(lines.join("\n"));
    for (const [k, clip] of CLIPS.entries()) {
      for (const a of resolveOverlaps(candidatesOf(k).filter((c) => c.confidence >= 0.6))) {
        const e = evidenceOf(k, a);
        const ref = normaliseWords(clip.reference);
        const said = normaliseWords(a.suggestion).every((w) => ref.includes(w)) && !clip.distractors.includes(a.suggestion);
        console.log(`${said ? "said      " : "not said  "} sound ${e.sound.toFixed(2)} p ${e.probability.toFixed(2)} fit ${e.fit.toFixed(2)}  "${a.original}" ~ ${a.suggestion}`);
      }
    }
  });
});

function evaluate(threshold: number | ((clip: number, a: Annotation) => boolean), log: boolean, clips = CLIPS.map((_, k) => k)) {
    let applied = 0;
    let wrongApplied = 0;
    let missed = 0;
    let recovered = 0;
    CLIPS.forEach((clip, k) => {
      if (!clips.includes(k)) return;
      const { segments } = transcripts[k]!;
      const ref = normaliseWords(clip.reference);
      const rawWords = normaliseWords(segments.join(" "));
      const raw = alignMatches(ref, rawWords);
      const vocabulary = vocabularyOf({ known_terms: [...clip.terms, ...clip.distractors] }, undefined);
      const spans = segments.map((text, id) => ({ id, text }));
      const annotations = typeof threshold === "number" ? annotateSegments(spans, vocabulary, pronounce) : [];
      const confident =
        typeof threshold === "number" ? confidentAnnotations(annotations, threshold) : resolveOverlaps(candidatesOf(k).filter((a) => threshold(k, a)));
      const reviewed = segments.map((text, id) => applyToText(text, confident.filter((a) => a.segment_id === id)));

      // Precision: every applied span held only wrong words, and its suggestion is said here.
      let offset = 0;
      segments.forEach((text, id) => {
        for (const a of confident.filter((c) => c.segment_id === id)) {
          applied++;
          const span = raw.hypCorrect.slice(offset + a.start_word, offset + a.end_word);
          const said = normaliseWords(a.suggestion).every((w) => ref.includes(w));
          const ok = span.every((c) => !c) && said && !clip.distractors.includes(a.suggestion);
          if (!ok) wrongApplied++;
          if (log) console.log(`${ok ? "ok   " : "WRONG"} ${a.confidence.toFixed(2)} "${a.original}" -> "${a.suggestion}"  (${clip.file.split("/").pop()})`);
        }
        offset += normaliseWords(text).length;
      });
      if (log) for (const a of annotations.filter((x) => !confident.includes(x))) console.log(`kept  ${a.confidence.toFixed(2)} "${a.original}" ~ "${a.suggestion}"`);

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
