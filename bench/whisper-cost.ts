/**
 * The whisper.cpp engine against whisper.cpp's own command-line tool, side by side in
 * one run: `./scripts/bench.sh whisper-cost [--shape base] [--runs 3] [--threads 2]
 * [--tokens 90] [--clip jfk.wav] [--omp-wait-policy PASSIVE|ACTIVE]` (no services needed; quiet machine: the figures are
 * wall times).
 *
 * Both decode the same generated model (test/support/workers-whisper-model.ts: the
 * released shape's widths, layers and heads, random f16 weights, written once under
 * .data/bench-models/), the same clip, with the same settings: greedy, temperature 0
 * and no fallback (random weights would make either side re-decode every window six
 * times), one token per segment with token timestamps (`-ml 1`), the same threads and
 * the whole 30 s encoder window (what the engine gives clips; only partial re-decodes
 * shorten it). whisper-cli is built here from
 * the very sources the engine's worker is (node_modules/nodejs-whisper's whisper.cpp,
 * into build/whisper-cli; once, a few minutes). Its time is its own "total time" minus
 * its "load time"; the engine's is the transcribe call, model loaded once beforehand.
 *
 * The tokens a window decodes are held to a realistic count: a model with random
 * weights never says end-of-text, so it decodes to the window's limit (text context / 2
 * − 4 = 220 tokens for the released models' 448). `--tokens N` writes the model with
 * a text context of 2 × (N + 4), so a window stops at N tokens on both sides (90 by
 * default: about 3 per second of speech, what a trained model emits with timestamps);
 * `--tokens 220` keeps the released context.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { availableParallelism, cpus } from "node:os";
import { join, resolve } from "node:path";
import { createWhisperEngine } from "../services/transcriber/whisper-engine";
import { decodeAudio } from "../shared/audio/decode";
import { fixturePath } from "../test/support/fixtures";
import { WHISPER_SHAPES } from "../test/support/workers-whisper-model";
import { benchModel } from "./support/whisper-models";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const shapeName = (args.get("shape") ?? "base") as keyof typeof WHISPER_SHAPES;
const runs = Number(args.get("runs") ?? 3);
const threads = Number(args.get("threads") ?? availableParallelism());
const tokens = Number(args.get("tokens") ?? 90);
const clipName = args.get("clip") ?? "jfk.wav";
// OpenMP's wait policy, the same on both sides (the engine's default is PASSIVE: whisper-process.ts says why)
const ompWaitPolicy = args.get("omp-wait-policy") ?? "PASSIVE";
const root = resolve(import.meta.dirname, "..");

/** whisper-cli from the engine's own whisper.cpp sources (built once into build/whisper-cli). */
function whisperCli(): string {
  const bin = join(root, "build/whisper-cli/bin/whisper-cli");
  if (existsSync(bin)) return bin;
  const tree = join(root, "node_modules/nodejs-whisper/cpp/whisper.cpp");
  console.log("building whisper-cli from", tree, "(once)");
  execFileSync("cmake", ["-S", tree, "-B", join(root, "build/whisper-cli"), "-DCMAKE_BUILD_TYPE=Release", "-DWHISPER_SDL2=OFF", "-DWHISPER_CURL=OFF", "-DWHISPER_BUILD_TESTS=OFF"], { stdio: "ignore" });
  execFileSync("cmake", ["--build", join(root, "build/whisper-cli"), "-j", String(availableParallelism()), "--target", "whisper-cli"], { stdio: "ignore" });
  return bin;
}

async function main() {
  const cli = whisperCli();
  const model = await benchModel(shapeName, tokens);
  const clipPath = clipName.includes("/") ? clipName : fixturePath(clipName);
  const pcm = (await decodeAudio(readFileSync(clipPath))).pcm;
  const seconds = pcm.length / 16_000;
  const audioCtx = 0; // a clip's decode: the whole window, as the engine runs clips
  console.log(`${shapeName}-shaped model (random weights, ≤ ${tokens} tokens per window), ${clipName} (${seconds.toFixed(1)} s), ${threads} threads, audio_ctx ${audioCtx || 1500}, greedy, no fallback, OMP_WAIT_POLICY ${ompWaitPolicy}; ${cpus()[0]?.model} × ${availableParallelism()}`);
  const engine = await createWhisperEngine({ modelPath: model, parallel: 1, threads, fallback: false, ompWaitPolicy });
  const cliMs: number[] = [];
  const engineMs: number[] = [];
  try {
    for (let r = 0; r < runs; r++) {
      const timings = cliTimings(cli, model, clipPath, audioCtx);
      cliMs.push(timings.total - timings.load);
      const started = performance.now();
      const r1 = await engine.transcribe({ pcm, language: "en" });
      engineMs.push(performance.now() - started);
      console.log(`run ${r + 1}: whisper-cli ${(cliMs.at(-1)! / 1000).toFixed(2)} s, engine ${(engineMs.at(-1)! / 1000).toFixed(2)} s (${r1.words.length} words)`);
    }
  } finally {
    await engine.close();
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`median: whisper-cli ${(median(cliMs) / 1000).toFixed(2)} s, engine ${(median(engineMs) / 1000).toFixed(2)} s: ${(median(engineMs) / median(cliMs)).toFixed(2)}× whisper-cli (real-time factor ${(median(engineMs) / 1000 / seconds).toFixed(3)})`);
}

/** whisper-cli's own timings (ms, from its stderr): its total, and the model load inside it. */
function cliTimings(cli: string, model: string, clip: string, audioCtx: number): { total: number; load: number } {
  const argv = ["-m", model, "-f", clip, "-t", String(threads), "-ml", "1", "-nf", "-bs", "1", "-bo", "1", "-l", "en", "-ac", String(audioCtx)];
  const stderr = execFileSync("sh", ["-c", '"$@" 2>&1 >/dev/null', "sh", cli, ...argv], { encoding: "utf8", env: { ...process.env, OMP_WAIT_POLICY: ompWaitPolicy } });
  const ms = (label: string) => Number(new RegExp(`${label}\\s*=\\s*([\\d.]+) ms`).exec(stderr)?.[1] ?? NaN);
  return { total: ms("total time"), load: ms("load time") };
}

await main();
