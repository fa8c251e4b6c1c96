/**
 * Numbers and redaction on the labelled set (issue 27; bench/support/number-cases.ts):
 * per number class, how many sentences smart format writes exactly as expected; per
 * entity type, redaction precision and recall (a span counts when its label and words
 * are right); the delta latency redaction costs on the streamed path (words held back
 * until their entity is judged, simulated with LocalAgreement's cadence); and, with
 * --engine N, the same on PocketSphinx's own output of N cases per class spoken by
 * espeak-ng in two voices and rates. Last, apart from the generated set: the real digit
 * recordings in Debian's pocketsphinx-testdata (recordedCases), their reference words and
 * what the embedded engine hears in them (skipped when the package is not installed).
 * Run: npx tsx bench/formatting.ts [--per-class 40] [--engine 4]   (or ./scripts/bench.sh formatting)
 */
import { parseArgs } from "node:util";
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { decodeAudio } from "../shared/audio/decode";
import { streamedDelta, type EmittedWord } from "../domain/transcript/item-transcript";
import { shapeTranscription, transcriptPipeline } from "../domain/transcript/pipeline";
import { findEntities, redactRules } from "../domain/transcript/redact";
import { smartFormatText } from "../domain/transcript/smart-format";
import { synthesise } from "../test/support/espeak";
import { existsSync, readFileSync } from "node:fs";
import { numberCases, RECORDED_DIR, recordedCases, type NumberCase } from "./support/number-cases";

const { values } = parseArgs({ options: { "per-class": { type: "string", default: "40" }, engine: { type: "string", default: "0" } } });
const cases = numberCases(Number(values["per-class"]));
const pct = (a: number, b: number) => (b ? `${((100 * a) / b).toFixed(1)}%` : "n/a");

/** Per class: exact / total; per label: true positives, predicted, expected. */
interface Score { exact: Map<string, [number, number]>; spans: Map<string, { tp: number; pred: number; gold: number }> }
const newScore = (): Score => ({ exact: new Map(), spans: new Map() });

function scoreCase(score: Score, c: NumberCase, heard: string): void {
  if (c.formatted !== undefined) {
    const [ok, n] = score.exact.get(c.kind) ?? [0, 0];
    score.exact.set(c.kind, [ok + (smartFormatText(heard) === c.formatted ? 1 : 0), n + 1]);
  }
  if (!c.redact.length) return;
  const words = heard.split(" ").filter(Boolean);
  const pred = findEntities(words, redactRules(c.redact, [])).map((s) => ({ label: s.label, words: words.slice(s.from, s.end).join(" ") }));
  const labels = new Set([...pred.map((p) => p.label), ...c.entities.map((e) => e.label)]);
  for (const label of labels) {
    const s = score.spans.get(label) ?? { tp: 0, pred: 0, gold: 0 };
    const mine = pred.filter((p) => p.label === label);
    const gold = c.entities.filter((e) => e.label === label);
    s.pred += mine.length;
    s.gold += gold.length;
    s.tp += gold.filter((g) => mine.some((p) => p.words === g.words)).length;
    score.spans.set(label, s);
  }
}

function report(title: string, score: Score): void {
  console.log(`\n${title}\nnumber class | exact`);
  let ok = 0;
  let n = 0;
  for (const [kind, [a, b]] of score.exact) {
    console.log(`  ${kind.padEnd(14)} ${a}/${b} ${pct(a, b)}`);
    ok += a;
    n += b;
  }
  console.log(`  ${"all".padEnd(14)} ${ok}/${n} ${pct(ok, n)}`);
  console.log("entity | precision | recall");
  for (const [label, s] of score.spans) console.log(`  ${label.padEnd(20)} ${pct(s.tp, s.pred).padStart(6)} (${s.tp}/${s.pred})  ${pct(s.tp, s.gold).padStart(6)} (${s.tp}/${s.gold})`);
}

// 1. transcripts the engine heard right: the spoken words themselves
const text = newScore();
for (const c of cases) scoreCase(text, c, c.spoken);
report(`text (${cases.length} generated sentences, the engine heard every word right)`, text);

// 2. the delta latency of redaction: words become stable one per 350 ms (LocalAgreement
// sends a word once two hypotheses agree, ~one partial interval after it was spoken); the
// commit comes 500 ms after the last word (silence_duration_ms)
const WORD_MS = 350;
let held = 0;
let delayed = 0;
let extraMs = 0;
let maxMs = 0;
let words = 0;
const byKind = new Map<string, { words: number; extraMs: number; max: number }>();
for (const c of cases.filter((x) => x.redact.length)) {
  const k = byKind.get(c.kind) ?? { words: 0, extraMs: 0, max: 0 };
  byKind.set(c.kind, k);
  const spoken = c.spoken.split(" ");
  const pipeline = transcriptPipeline({ redact: c.redact });
  const emitted: EmittedWord[] = [];
  const sentAt: number[] = [];
  for (let n = 1; n <= spoken.length; n++) {
    const d = streamedDelta(pipeline, emitted, spoken.slice(emitted.length, n));
    for (let i = 0; i < d.words.length; i++) sentAt[emitted.length + i] = n;
    emitted.push(...d.words);
  }
  for (let i = 0; i < spoken.length; i++) {
    const extra = ((sentAt[i] ?? spoken.length + 500 / WORD_MS) - (i + 1)) * WORD_MS;
    words++;
    if (sentAt[i] === undefined) held++;
    if (extra > 0) delayed++;
    extraMs += extra;
    maxMs = Math.max(maxMs, extra);
    k.words++;
    k.extraMs += extra;
    k.max = Math.max(k.max, extra);
  }
}
for (const [kind, k] of byKind) console.log(`  ${kind.padEnd(14)} mean extra delay per word ${(k.extraMs / k.words).toFixed(0)} ms, max ${k.max.toFixed(0)} ms`);
console.log(`\nstreamed deltas with redaction: ${delayed}/${words} words sent later than without (${held} only at the commit); mean extra delay ${(extraMs / Math.max(1, delayed)).toFixed(0)} ms per delayed word, ${(extraMs / words).toFixed(0)} ms over all words, max ${maxMs.toFixed(0)} ms`);

// 3. the engine's own output: espeak-ng speech through PocketSphinx
const perClass = Number(values.engine);
if (perClass > 0) {
  const engine = await createPocketsphinxEngine({ processes: 1 });
  const heard = newScore();
  const voices = [{ voice: "en-us+f2", wordsPerMinute: 140 }, { voice: "en-us+m3", wordsPerMinute: 170 }];
  const kinds = [...new Set(cases.map((c) => c.kind))];
  let digitsRight = 0;
  let n = 0;
  for (const kind of kinds) {
    for (const [i, c] of cases.filter((x) => x.kind === kind).slice(0, perClass).entries()) {
      const r = await engine.transcribe({ pcm: (await decodeAudio(await synthesise(c.spoken, voices[i % 2]))).pcm });
      const got = r.words.map((w) => w.word).join(" ");
      n++;
      if (got === c.spoken) digitsRight++;
      scoreCase(heard, c, got);
      if (c.redact.length) {
        const shaped = shapeTranscription(transcriptPipeline({ redact: c.redact }), r).text;
        if (c.entities.length && !c.entities.every((e) => shaped.includes(`[${e.label}]`))) console.log(`  missed ${kind}: "${c.spoken}" heard "${got}"`);
      }
    }
  }
  await engine.close();
  report(`PocketSphinx on espeak-ng (${n} clips; ${digitsRight} heard word for word)`, heard);
}

// 4. real recordings (Debian's pocketsphinx-testdata), apart from the generated set
const recorded = recordedCases.filter((c) => existsSync(`${RECORDED_DIR}/${c.file}`));
if (recorded.length) {
  const reference = newScore();
  for (const c of recorded) scoreCase(reference, c, c.spoken);
  report(`real recordings, reference words (${recorded.length} clips)`, reference);
  const engine = await createPocketsphinxEngine({ processes: 1 });
  const heard = newScore();
  let exactWords = 0;
  let digitsHeard = 0;
  let digitsSpoken = 0;
  for (const c of recorded) {
    const raw = readFileSync(`${RECORDED_DIR}/${c.file}`);
    const pcm = new Int16Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength - (raw.byteLength % 2)));
    const r = await engine.transcribe({ pcm });
    const got = r.words.map((w) => w.word).join(" ");
    const want = c.spoken.split(" ");
    // digits heard: reference digits matched in order (longest common subsequence)
    const lcs = lcsLength(want, got.split(" "));
    if (got === c.spoken) exactWords++;
    digitsHeard += lcs;
    digitsSpoken += want.length;
    scoreCase(heard, c, got);
    const shaped = shapeTranscription(transcriptPipeline({ redact: c.redact }), r).text;
    console.log(`  ${c.file}: said "${c.spoken}" -> heard "${got}" -> formatted "${smartFormatText(got)}" (want "${c.formatted}"); redact=${c.redact.join(",")}: "${shaped}"`);
  }
  await engine.close();
  report(`real recordings, PocketSphinx's own output (${recorded.length} clips; ${exactWords} heard word for word; ${digitsHeard}/${digitsSpoken} digits heard in order)`, heard);
}

function lcsLength(a: readonly string[], b: readonly string[]): number {
  const row = new Array<number>(b.length + 1).fill(0);
  for (const x of a) {
    let prev = 0;
    for (let j = 1; j <= b.length; j++) {
      const keep = row[j]!;
      row[j] = x === b[j - 1] ? prev + 1 : Math.max(row[j]!, row[j - 1]!);
      prev = keep;
    }
  }
  return row[b.length]!;
}
