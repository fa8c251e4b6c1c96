/**
 * What a machine holds with whisper.cpp, per model size: `./scripts/bench.sh
 * whisper-capacity [--shapes tiny,base,small,large-v3-turbo] [--tokens-per-second 3]`
 * (no services needed; a quiet machine: the figures are wall times).
 *
 * For each released shape (test/support/workers-whisper-model.ts: real widths, layer
 * counts, heads; random f16 weights, since compute does not depend on their values),
 * through the service's own engine (services/transcriber/whisper-engine.ts, greedy, no
 * fallback). Random weights never end a window by themselves, so each decode is held to
 * what speech of the clip's length holds: `--tokens-per-second` text tokens a second of
 * audio (3: about 150 words a minute; whisper.cpp's max_tokens, WhisperOptions.maxTokensPerSecond),
 * and at most 90 a window (the model's text context; bench/whisper-cost.ts explains why).
 *
 * - whole clip: real-time factor of jfk.wav (11 s) decoded alone on every core;
 * - partial: one re-decode of a growing item's first 2 s (the encoder context sized to
 *   the audio, as the realtime plane's partials are), and the final of a 5 s item (the
 *   whole window, as finals are), alone on every core;
 * - segments/s: 1 s clips decoded back to back by as many parallel decodes as cores,
 *   one thread each (the segment plane's short-clip throughput);
 * - speakers: continuous speakers one machine holds, from those costs: a speaker who
 *   talks all the time in 5 s utterances costs, per 5 s of speech, the re-decodes of
 *   the growing item every `partial_interval_ms` (500 ms: items of 0.5, 1, …, 5 s) and
 *   the final decode of the whole item; the machine holds cores ÷ (that CPU time ÷ 5 s)
 *   of them, and the final then waits behind at most the other decodes in flight.
 *   `finalMs` is the whole item's decode alone. The final is decoded during the pause
 *   that ends the item (services/vad/redecode.ts, from 200 ms into server_vad's 500 ms
 *   silence), so it comes `finalMs − 300` ms after the VAD stops: within the 300 ms
 *   target while `finalMs` ≤ 600; and the first partial, a decode of the item's first
 *   500 ms, is due 1 s after the word ends at most. A shape that misses either alone
 *   holds no speaker within the targets (0), whatever the CPU left.
 */
import { availableParallelism, cpus } from "node:os";
import { readFileSync } from "node:fs";
import { createWhisperEngine } from "../services/transcriber/whisper-engine";
import { decodeAudio } from "../shared/audio/decode";
import { fixturePath } from "../test/support/fixtures";
import { WHISPER_SHAPES } from "../test/support/workers-whisper-model";
import { benchModel } from "./support/whisper-models";
import { recordResults } from "./support/results";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const shapes = (args.get("shapes") ?? "tiny,base,small,large-v3-turbo").split(",") as Array<keyof typeof WHISPER_SHAPES>;
const tokensPerSecond = Number(args.get("tokens-per-second") ?? 3);
const TOKENS_PER_WINDOW = 90;
/** server_vad's silence (500 ms) less the pause before the final is decoded ahead (200 ms). */
const AHEAD_LEAD_MS = 300;
const cores = availableParallelism();
const PARTIAL_INTERVAL_S = 0.5;
const UTTERANCE_S = 5;

const jfk = (await decodeAudio(readFileSync(fixturePath("jfk.wav")))).pcm;
const seconds = (pcm: Int16Array) => pcm.length / 16_000;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

console.log(`whisper.cpp capacity on ${cpus()[0]?.model} × ${cores} (random weights, ${tokensPerSecond} tokens per second of audio, ≤ ${TOKENS_PER_WINDOW} a window, greedy, no fallback)`);
console.log("shape | whole clip RTF | partial of 2 s (ms) | final of a 5 s item (ms) | 1 s segments/s | cores a speaker | continuous speakers within the targets");
const rows: Array<Record<string, string | number>> = [];
for (const shape of shapes) {
  const modelPath = await benchModel(shape, TOKENS_PER_WINDOW);
  const time = async (engine: Awaited<ReturnType<typeof createWhisperEngine>>, pcm: Int16Array, runs = 3, partial = false) => {
    const ms: number[] = [];
    for (let r = 0; r < runs; r++) {
      const t = performance.now();
      await engine.transcribe({ pcm, language: "en", partial });
      ms.push(performance.now() - t);
    }
    return median(ms);
  };
  const alone = await createWhisperEngine({ modelPath, parallel: 1, threads: cores, fallback: false, maxTokensPerSecond: tokensPerSecond });
  let whole: number, p2: number, p5: number, costPerUtterance: number;
  let firstPartial = 0;
  try {
    // the first decode pays the buffers' allocation; a shape whose window takes seconds is timed once
    const runs = (await time(alone, jfk.subarray(0, 16_000), 1)) > 5000 ? 1 : 3;
    whole = await time(alone, jfk, runs);
    p2 = await time(alone, jfk.subarray(0, 2 * 16_000), runs, true);
    p5 = await time(alone, jfk.subarray(0, UTTERANCE_S * 16_000), runs);
    // the re-decodes of a growing 5 s item, then its final (each alone on every core)
    costPerUtterance = 0;
    for (let t = PARTIAL_INTERVAL_S; t < UTTERANCE_S; t += PARTIAL_INTERVAL_S) {
      const ms = await time(alone, jfk.subarray(0, Math.round(t * 16_000)), 1, true);
      if (t === PARTIAL_INTERVAL_S) firstPartial = ms;
      costPerUtterance += ms;
    }
    costPerUtterance += p5;
  } finally {
    await alone.close();
  }
  const parallel = await createWhisperEngine({ modelPath, parallel: cores, threads: 1, fallback: false, maxTokensPerSecond: tokensPerSecond });
  let perSecond: number;
  try {
    const clip = jfk.subarray(0, 16_000);
    await Promise.all(Array.from({ length: cores }, () => parallel.transcribe({ pcm: clip, language: "en" })));
    const started = performance.now();
    let done = 0;
    const until = started + 10_000;
    await Promise.all(
      Array.from({ length: cores }, async () => {
        while (performance.now() < until) {
          await parallel.transcribe({ pcm: clip, language: "en" });
          done++;
        }
      }),
    );
    perSecond = done / ((performance.now() - started) / 1000);
  } finally {
    await parallel.close();
  }
  // each cost is a decode alone on every core: the machine does one second of them per second
  const withinTargets = p5 - AHEAD_LEAD_MS <= 300 && firstPartial + PARTIAL_INTERVAL_S * 1000 <= 1000;
  const speakers = withinTargets ? Math.floor(UTTERANCE_S / (costPerUtterance / 1000)) : 0;
  const speakerCores = +((costPerUtterance / 1000 / UTTERANCE_S) * cores).toFixed(2);
  const row = { shape, wholeRtf: +(whole / 1000 / seconds(jfk)).toFixed(3), partial2sMs: Math.round(p2), finalMs: Math.round(p5), finalAfterStopMs: Math.max(0, Math.round(p5 - AHEAD_LEAD_MS)), segmentsPerSecond: +perSecond.toFixed(1), speakerCores, speakers };
  rows.push(row);
  console.log(`${shape} | ${row.wholeRtf} | ${row.partial2sMs} | ${row.finalMs} (${row.finalAfterStopMs} after the VAD stops${row.finalAfterStopMs > 300 ? ": over 300" : ""}) | ${row.segmentsPerSecond} | ${speakerCores} | ${speakers}`);
}
const file = recordResults("whisper-capacity", rows);
if (file) console.log(`results: ${file}`);
