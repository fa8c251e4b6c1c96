/**
 * The embedded engine against PocketSphinx's own C API: `npx tsx bench/engine-cost.ts`
 * (no services needed; run it under `nice` on a shared machine, the figures are CPU time).
 *
 * On the labelled clips (bench/support/clips.ts) each path is decoded twice at identical
 * decoder settings, side by side in one run:
 *
 * - bare: bench/support/ps-bare.c (built here on demand into build/ps-bare, with the
 *   same cc/pkg-config line as scripts/build-native.sh): ps_start_utt, ps_process_raw in
 *   20 ms pieces, ps_end_utt, ps_get_hyp, nothing else; once with live CMN as it
 *   comes, once with CMN seeded as ps-worker seeds it (the whole clip's mean on the
 *   commit path, the first 0.8 s on the streamed one, whose row also reads the running
 *   hypothesis every partial interval, as the VAD does). The seeded row does the same
 *   work as ps-worker and is the one the ratio is taken against.
 * - ps-worker: the service's own clients. Commit path: the embedded engine
 *   (services/transcriber/pocketsphinx/engine.ts, PSS1 whole-clip requests: clip CMN,
 *   PocketSphinx's VAD splitting, second pass). Streamed path: the VAD's decoder pool
 *   (services/vad/stream-decoders.ts, PSS2: START with no CMN so the first 0.8 s seeds
 *   it, AUDIO every 30 ms VAD frame, HYP every partial_interval_ms, END).
 *
 * Printed per row: CPU seconds per audio second (bare: its own clock around each clip;
 * ps-worker: the process's user+system time from /proc, model load excluded) and WER.
 *
 *   BENCH_PATHS=commit|stream       one path only (default both)
 *   BENCH_TABLE='[["label",["-opt","value",..]],..]'  instead of the side by side run:
 *                                    ps-worker on each path (BENCH_PATHS) at each of these
 *                                    settings, with the seeded bare API beside it (the settings table)
 *   BENCH_REPEAT=n                  decode the clips n times (steadier CPU figures)
 *   BENCH_SPEAKERS=k                the streamed path only, at the pace people speak: k
 *                                    speakers at once, each decoding the clips at real
 *                                    time from its own point of the list (bare: k ps-bare
 *                                    processes with PS_BARE_REALTIME=1, fed 120 ms at a
 *                                    time; ps-worker: a pool of k decoders fed every 30 ms
 *                                    VAD frame, partials every partial interval), one
 *                                    after the other: what k continuous speakers cost
 */
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { DEFAULT_PARTIAL_INTERVAL_MS } from "../schemas/realtime";
import { COMMIT_DECODER_OPTIONS, createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { createStreamDecoderPool, STREAM_DECODER_OPTIONS, type StreamHypothesis } from "../services/vad/stream-decoders";
import { buildAgainstPocketsphinx, ensurePocketsphinxBinary } from "../shared/pocketsphinx/build";
import { wordErrorRate } from "../shared/workers/wer";
import { labelledClips } from "./support/clips";
import { childPids, cpuSeconds } from "./support/proc";

const MODEL = "/usr/share/pocketsphinx/model/en-us";
const VAD_FRAME = 480;
const HYP_EVERY = (16_000 * DEFAULT_PARTIAL_INTERVAL_MS) / 1000;

type Clip = Awaited<ReturnType<typeof labelledClips>>[number];
interface Run {
  cpu: number;
  texts: string[];
}

function bare(bin: string, list: string, hypEvery: number, cmn: "live" | "warm" | "clip", options: string[]): Run {
  const out = execFileSync(bin, [MODEL, list, String(hypEvery), cmn, ...options], { encoding: "utf8", maxBuffer: 1 << 26 });
  const lines = out.trim().split("\n").map((l) => JSON.parse(l) as { hyp: string; cpu: number });
  return { cpu: lines.reduce((a, l) => a + l.cpu, 0), texts: lines.map((l) => l.hyp) };
}

async function commitWorker(clips: Clip[], options: string[]): Promise<Run> {
  const before = new Set(childPids());
  const engine = await createPocketsphinxEngine({ processes: 1, decoderOptions: options });
  const pid = childPids().find((p) => !before.has(p))!;
  const cpu0 = cpuSeconds(pid);
  const texts: string[] = [];
  for (const c of clips) texts.push((await engine.transcribe({ pcm: c.pcm })).text);
  const cpu = cpuSeconds(pid) - cpu0;
  await engine.close();
  return { cpu, texts };
}

async function streamWorker(clips: Clip[], options: string[]): Promise<Run> {
  const pool = await createStreamDecoderPool({ size: 1, warm: 1, decoderOptions: options });
  const texts: string[] = [];
  let cpu = 0;
  let loaded = false;
  for (const c of clips) {
    const u = pool.acquire({ prompt: null, cmn: null })!;
    if (!loaded) {
      await u.hypothesis(); // answered once the model is loaded
      loaded = true;
    }
    const cpu0 = cpuSeconds(u.pid);
    const partials: Promise<StreamHypothesis>[] = [];
    for (let i = 0, since = 0; i < c.pcm.length; i += VAD_FRAME, since += VAD_FRAME) {
      u.feed(c.pcm.subarray(i, i + VAD_FRAME));
      if (since >= HYP_EVERY) (since = 0), partials.push(u.hypothesis());
    }
    await Promise.all(partials);
    const r = await u.end();
    cpu += cpuSeconds(u.pid) - cpu0;
    texts.push(r.words.map((w) => w.word).join(" "));
  }
  await pool.close();
  return { cpu, texts };
}

/** k ps-bare processes at once, each at real time from its own rotation of the clips. */
async function bareSpeakers(bin: string, clipFiles: string[], k: number, options: string[]): Promise<Run> {
  const runs = await Promise.all(
    Array.from({ length: k }, (_, i) => {
      const own = join(dir, `speaker-${i}.txt`);
      const from = Math.floor((i * clipFiles.length) / k);
      writeFileSync(own, [...clipFiles.slice(from), ...clipFiles.slice(0, from)].join("\n"));
      return new Promise<Run>((res, rej) =>
        execFile(bin, [MODEL, own, String(HYP_EVERY), "warm", ...options], { encoding: "utf8", maxBuffer: 1 << 26, env: { ...process.env, PS_BARE_REALTIME: "1" } }, (err, out) => {
          if (err) return rej(err);
          const lines = out.trim().split("\n").map((l) => JSON.parse(l) as { hyp: string; cpu: number });
          res({ cpu: lines.reduce((a, l) => a + l.cpu, 0), texts: [] });
        }),
      );
    }),
  );
  return { cpu: runs.reduce((a, r) => a + r.cpu, 0), texts: [] };
}

/** A pool of k decoders, k speakers at once, each feeding the clips at real time (30 ms VAD frames) from its own point, partials every partial interval. */
async function workerSpeakers(clipsOf: Clip[], k: number, options: string[]): Promise<Run> {
  const pool = await createStreamDecoderPool({ size: k, warm: k, decoderOptions: options });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const speaker = async (i: number) => {
    const from = Math.floor((i * clipsOf.length) / k);
    let cpu = 0;
    for (const c of [...clipsOf.slice(from), ...clipsOf.slice(0, from)]) {
      const u = pool.acquire({ prompt: null, cmn: null })!;
      await u.hypothesis(); // the model is loaded: only the clip's decode is counted
      const cpu0 = cpuSeconds(u.pid);
      const start = performance.now();
      const partials: Promise<StreamHypothesis>[] = [];
      for (let at = 0, since = 0; at < c.pcm.length; at += VAD_FRAME, since += VAD_FRAME) {
        u.feed(c.pcm.subarray(at, at + VAD_FRAME));
        if (since >= HYP_EVERY) (since = 0), partials.push(u.hypothesis());
        const wait = start + ((at + VAD_FRAME) / 16) - performance.now();
        if (wait > 0) await sleep(wait);
      }
      await Promise.all(partials);
      await u.end();
      cpu += cpuSeconds(u.pid) - cpu0;
    }
    return cpu;
  };
  const cpus = await Promise.all(Array.from({ length: k }, (_, i) => speaker(i)));
  await pool.close();
  return { cpu: cpus.reduce((a, b) => a + b, 0), texts: [] };
}

const repeat = Number(process.env.BENCH_REPEAT ?? 1);
const labelled = await labelledClips();
const clips = Array.from({ length: repeat }, () => labelled).flat();
const audio = clips.reduce((a, c) => a + c.pcm.length / 16_000, 0);
const dir = mkdtempSync(join(tmpdir(), "engine-cost-"));
const list = join(dir, "clips.txt");
const clipFiles = clips.map((c, i) => {
  const path = join(dir, `${i}.raw`);
  writeFileSync(path, c.pcm);
  return path;
});
writeFileSync(list, clipFiles.join("\n"));
const bin = await buildAgainstPocketsphinx(resolve(import.meta.dirname, "support/ps-bare.c"), resolve(import.meta.dirname, "../build/ps-bare"));
await ensurePocketsphinxBinary();

const wer = (r: Run) => {
  let errors = 0, words = 0;
  r.texts.forEach((t, i) => {
    const w = wordErrorRate(clips[i]!.ref, t);
    errors += w.errors;
    words += w.referenceWords;
  });
  return (100 * errors) / words;
};
const row = (label: string, r: Run) => console.log(`${label.padEnd(56)} ${(r.cpu / audio).toFixed(3).padStart(6)} CPU-s/audio-s   WER ${wer(r).toFixed(1)}%`);
const ratio = (a: Run, b: Run) => console.log(`${"  ps-worker / bare (seeded)".padEnd(56)} ${(a.cpu / b.cpu).toFixed(2)}×`);

console.log(`${labelled.length} clips × ${repeat}, ${audio.toFixed(1)} s of speech`);
const speakers = Number(process.env.BENCH_SPEAKERS ?? 0);
if (speakers > 0) {
  console.log(`\n${speakers} speakers at once at real time, stream path, service settings: ${STREAM_DECODER_OPTIONS.join(" ")}`);
  const b = await bareSpeakers(bin, clipFiles, speakers, STREAM_DECODER_OPTIONS);
  const w = await workerSpeakers(clips, speakers, STREAM_DECODER_OPTIONS);
  const perSpeaker = (r: Run) => console.log(`  ${(r.cpu / (audio * speakers)).toFixed(3)} CPU-s per audio second, ${((r.cpu / (audio * speakers)) * speakers).toFixed(2)} cores for ${speakers} continuous speakers`);
  console.log(`bare API (ps-bare × ${speakers}, PS_BARE_REALTIME=1)`);
  perSpeaker(b);
  console.log(`ps-worker PSS2 through the pool (stream-decoders.ts)`);
  perSpeaker(w);
  ratio(w, b);
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
const paths = process.env.BENCH_PATHS ? [process.env.BENCH_PATHS] : ["commit", "stream"];
const table: [string, string[]][] | null = process.env.BENCH_TABLE ? JSON.parse(process.env.BENCH_TABLE) : null;
for (const path of paths) {
  const settings = table ?? [["service settings", path === "commit" ? COMMIT_DECODER_OPTIONS : STREAM_DECODER_OPTIONS]];
  for (const [label, options] of settings) {
    console.log(`\n${path} path, ${label}: ${options.join(" ") || "(ps-worker's built-in options)"}`);
    if (path === "commit") {
      const b0 = table ? null : bare(bin, list, 0, "live", options);
      const b = bare(bin, list, 0, "clip", options);
      const w = await commitWorker(clips, options);
      if (b0) row("bare API, live CMN", b0);
      row("bare API, CMN seeded from the clip", b);
      row("ps-worker PSS1 (engine.ts)", w);
      ratio(w, b);
    } else {
      const b0 = table ? null : bare(bin, list, 0, "live", options);
      const b = bare(bin, list, HYP_EVERY, "warm", options);
      const w = await streamWorker(clips, options);
      if (b0) row("bare API, live CMN, no partials", b0);
      row(`bare API, CMN seeded from 0.8 s, hyp every ${DEFAULT_PARTIAL_INTERVAL_MS} ms`, b);
      row("ps-worker PSS2 (stream-decoders.ts)", w);
      ratio(w, b);
    }
  }
}
rmSync(dir, { recursive: true, force: true });
