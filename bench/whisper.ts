/**
 * An operator's check of a real whisper.cpp model before pointing the service at it:
 *
 *   WHISPER_MODEL_PATH=/models/ggml-base.en.bin ./scripts/bench.sh whisper
 *
 * It loads the model through the service's own engine (services/transcriber/
 * whisper-engine.ts: the same file check, binding and options as `stt serve`), then
 * transcribes the labelled clips (Debian's LibriVox test data and the two fixtures) one
 * at a time and prints, per clip and overall, the word error rate against the
 * reference text and the real-time factor (wall seconds per audio second). It exits 1
 * when the LibriVox word error rate is at or above WHISPER_BENCH_MAX_WER (default 0.2;
 * a trained model scores well under it, the PocketSphinx engine about 0.27), and says
 * which WHISPER_REAL_TIME_FACTOR this machine needs: the router's timeouts follow the
 * declared factor (docs/workers.md, routing rule 4), so one lower than the measured
 * factor sends long clips to the fallback.
 *
 * The suite cannot do this: it runs the same engine on a generated model with random
 * weights (test/workers-whisper*.test.ts), which shows everything but accuracy.
 */
import { createWhisperEngine } from "../services/transcriber/whisper-engine";
import { wordErrorRate } from "../shared/workers/wer";
import { labelledClips } from "./support/clips";

const modelPath = process.env.WHISPER_MODEL_PATH;
if (!modelPath) {
  process.stderr.write("set WHISPER_MODEL_PATH to a whisper.cpp ggml model (ggml-*.bin), e.g. WHISPER_MODEL_PATH=/models/ggml-base.en.bin ./scripts/bench.sh whisper\n");
  process.exit(2);
}
const maxWer = Number(process.env.WHISPER_BENCH_MAX_WER ?? 0.2);

const t0 = performance.now();
const engine = await createWhisperEngine({ modelPath });
console.log(`loaded ${modelPath} in ${((performance.now() - t0) / 1000).toFixed(1)} s (languages: ${engine.languages?.join(", ")})`);
let libriErrors = 0;
let libriWords = 0;
let audioSeconds = 0;
let wallSeconds = 0;
try {
  for (const clip of await labelledClips()) {
    const seconds = clip.pcm.length / 16_000;
    const started = performance.now();
    const r = await engine.transcribe({ pcm: clip.pcm, language: "en" });
    const wall = (performance.now() - started) / 1000;
    const wer = wordErrorRate(clip.ref, r.text);
    if (!clip.name.endsWith(".wav")) {
      libriErrors += wer.errors;
      libriWords += wer.referenceWords;
    }
    audioSeconds += seconds;
    wallSeconds += wall;
    console.log(`${clip.name}: WER ${(wer.wer * 100).toFixed(1)}%, RTF ${(wall / seconds).toFixed(2)} (${seconds.toFixed(1)} s in ${wall.toFixed(1)} s): ${r.text}`);
  }
} finally {
  await engine.close();
}
const wer = libriErrors / libriWords;
const rtf = wallSeconds / audioSeconds;
console.log(`LibriVox WER ${(wer * 100).toFixed(1)}% over ${libriWords} words (bound ${(maxWer * 100).toFixed(0)}%); real-time factor ${rtf.toFixed(2)} over ${audioSeconds.toFixed(0)} s of audio`);
console.log(`set WHISPER_REAL_TIME_FACTOR to at least ${Math.max(0.1, Math.ceil(rtf * 1.5 * 10) / 10)} on this machine (the measured factor with a 50% margin for load; the default is 1)`);
process.exit(wer < maxWer ? 0 : 1);
