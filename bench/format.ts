/**
 * Formatted-text score of the embedded engine (issue 16): PocketSphinx on the
 * espeak-ng sentences (test/support/espeak.ts) and the two fixtures, each with its text
 * as it should read. Per clip and in total: the normalised word error rate of the
 * recognised words (the same with and without smart format: formatting never changes a
 * word) and the formatted error rate (case, punctuation and numerals count) of the text
 * without and with smart format, and the formatter's cost.
 * Run: npx tsx bench/format.ts   (or ./scripts/bench.sh format)
 */
import { readFile } from "node:fs/promises";
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { decodeAudio } from "../shared/audio/decode";
import { shapeTranscription, transcriptPipeline } from "../domain/transcript/pipeline";
import { formattedErrorRate, wordErrorRate } from "../shared/workers/wer";
import { FORMAT_FIXTURES, FORMAT_SENTENCES, synthesise } from "../test/support/espeak";
import { FIXTURES_DIR } from "../test/support/fixtures";

const clips = [
  ...(await Promise.all(FORMAT_SENTENCES.map(async (s) => ({ name: s.spoken.slice(0, 28), spoken: s.spoken, formatted: s.formatted, prompt: s.prompt, bytes: await synthesise(s.spoken) })))),
  ...(await Promise.all(FORMAT_FIXTURES.map(async (f) => ({ name: f.file, spoken: f.spoken, formatted: f.formatted, prompt: undefined, bytes: await readFile(`${FIXTURES_DIR}/${f.file}`) })))),
];

const engine = await createPocketsphinxEngine({ processes: 1 });
const total = { words: 0, wer: 0, tokens: 0, raw: 0, formatted: 0, ms: 0 };
console.log("clip | WER (words) | formatted errors without / with smart format");
for (const c of clips) {
  const r = await engine.transcribe({ pcm: (await decodeAudio(c.bytes)).pcm, prompt: c.prompt });
  const t0 = performance.now();
  const f = shapeTranscription(transcriptPipeline({ prompt: c.prompt }), r);
  total.ms += performance.now() - t0;
  const w = wordErrorRate(c.spoken, f.words.map((x) => x.word).join(" "));
  const before = formattedErrorRate(c.formatted, r.text);
  const after = formattedErrorRate(c.formatted, f.text);
  total.words += w.referenceWords;
  total.wer += w.errors;
  total.tokens += before.referenceWords;
  total.raw += before.errors;
  total.formatted += after.errors;
  console.log(`${c.name} | ${w.errors}/${w.referenceWords} | ${before.errors} / ${after.errors} of ${before.referenceWords}  "${f.text}"`);
}
await engine.close();
const pct = (a: number, b: number) => `${((100 * a) / b).toFixed(1)}%`;
console.log(`total: WER ${pct(total.wer, total.words)} (unchanged by formatting); formatted error rate ${pct(total.raw, total.tokens)} without smart format, ${pct(total.formatted, total.tokens)} with; formatting ${(total.ms / clips.length).toFixed(2)} ms per clip`);
