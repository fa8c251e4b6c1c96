/**
 * Segment-plane benchmark: `npx tsx bench/segment.ts` (needs NATS and Postgres, as the
 * tests do; `source scripts/setup.sh` first on a fresh machine).
 *
 * 1. The embedded PocketSphinx engine's real-time factor (processing seconds per audio
 *    second) on the labelled speech clips: one process sequentially, then the pool
 *    (one process per core) with every clip in flight at once.
 * 2. The gateway's own overhead per POST /v1/audio/transcriptions: client-observed
 *    latency minus the worker time the gateway reports in Server-Timing, p50/p99, and
 *    requests per second, with a zero-cost worker (a real NATS worker service whose
 *    engine returns an empty transcript at once) so nothing but the gateway, NATS
 *    request/reply, auth, rate limiting, decode and the usage/audit appends is measured.
 *
 * 3. Side by side (`BENCH_PART=side-by-side`, not run by default): the same load, a 1 s
 *    WAV as multipart with `response_format=json`, sent straight to a zero-cost
 *    OpenAI-compatible server (bench/support/zero-openai.ts: hono + node-server, parses
 *    the form, answers an empty transcript) and through the service (`stt serve`, its own
 *    process, `WORKER_EMBEDDED=none WORKER_OPENAI_URL=<that server>`), alternating
 *    rounds: requests per second at concurrency 8 and p50 at concurrency 1 of each, the
 *    service's share of the direct requests per second, the p50 it adds (the direct hop
 *    included in its path) and the error count. BENCH_PROFILE_DIR=dir writes the
 *    service's CPU profile there.
 *
 * Options (env): BENCH_REQUESTS (default 1000), BENCH_CONCURRENCY (default 8),
 * BENCH_PART=engine|gateway|side-by-side to run one part.
 */
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { execFileSync, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { startWorkerService } from "../services/transcriber/worker-service";
import { decodeAudio } from "../shared/audio/decode";
import { encodeWav } from "../shared/audio/wav";
import { createLogger } from "../shared/logger";
import type { TranscriptionEngine } from "../shared/workers/types";
import { wordErrorRate } from "../shared/workers/wer";
import { startStack } from "../test/support/stack";
import { FIXTURES_DIR } from "../test/support/fixtures";
import { BenchDeployment } from "./support/deployment";
import { stopServer } from "./support/server";
import { cpuSeconds } from "./support/proc";

const LIBRI = "/usr/share/pocketsphinx/test/data/librivox";
const FIX = FIXTURES_DIR;
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 1000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const AUDIO_ONLY = process.env.BENCH_PART === "engine";
const GATEWAY_ONLY = process.env.BENCH_PART === "gateway";
const SIDE_BY_SIDE = process.env.BENCH_PART === "side-by-side";

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};

async function labelledClips() {
  const lines = (await readFile(`${LIBRI}/transcription`, "utf8")).split("\n").filter(Boolean);
  const clips = lines.map((l) => {
    const m = /^(.*)\(([^)]+)\)\s*$/.exec(l)!;
    return { name: m[2]!, path: `${LIBRI}/${m[2]}.wav`, ref: m[1]!.replace(/<\/?s>/g, "").trim() };
  });
  const jfk = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.";
  clips.push({ name: "jfk.wav", path: `${FIX}/jfk.wav`, ref: jfk });
  clips.push({ name: "jfk.mp3", path: `${FIX}/jfk.mp3`, ref: jfk });
  clips.push({ name: "ldc93s1.wav", path: `${FIX}/ldc93s1.wav`, ref: "She had your dark suit in greasy wash water all year." });
  return Promise.all(clips.map(async (c) => ({ ...c, pcm: (await decodeAudio(await readFile(c.path))).pcm })));
}

async function benchEngine() {
  const clips = await labelledClips();
  const audio = clips.reduce((a, c) => a + c.pcm.length / 16_000, 0);
  console.log(`\n== Embedded PocketSphinx engine: ${clips.length} clips, ${audio.toFixed(1)} s of speech`);
  const one = await createPocketsphinxEngine({ processes: 1 });
  await one.transcribe({ pcm: clips[0]!.pcm }); // first touch
  let busy = 0;
  let libriErr = 0;
  let libriWords = 0;
  for (const c of clips) {
    const t0 = performance.now();
    const r = await one.transcribe({ pcm: c.pcm });
    const s = (performance.now() - t0) / 1000;
    busy += s;
    const w = wordErrorRate(c.ref, r.text);
    if (c.path.startsWith(LIBRI)) {
      libriErr += w.errors;
      libriWords += w.referenceWords;
    }
    console.log(`  ${c.name.padEnd(48)} ${(c.pcm.length / 16_000).toFixed(1).padStart(5)} s  RTF ${(s / (c.pcm.length / 16_000)).toFixed(2)}  WER ${(w.wer * 100).toFixed(1).padStart(5)}%`);
  }
  const cpu = childCpuSeconds();
  await one.close();
  console.log(`  one process, sequential: RTF ${(busy / audio).toFixed(3)} wall, ${(cpu / audio).toFixed(3)} in CPU seconds (load-independent; includes the model load)`);
  console.log(`  LibriVox WER: ${((libriErr / libriWords) * 100).toFixed(1)}% over ${libriWords} words`);
  const n = availableParallelism();
  const pool = await createPocketsphinxEngine({ processes: n });
  const t0 = performance.now();
  await Promise.all(clips.map((c) => pool.transcribe({ pcm: c.pcm })));
  const wall = (performance.now() - t0) / 1000;
  await pool.close();
  console.log(`  pool of ${n}, all clips in flight: ${wall.toFixed(2)} s wall for ${audio.toFixed(1)} s → aggregate RTF ${(wall / audio).toFixed(3)}`);
}

/** CPU seconds (user + system) used so far by this process's ps-worker children. */
function childCpuSeconds(): number {
  let pids: string[] = [];
  try {
    pids = execFileSync("pgrep", ["-P", String(process.pid), "ps-worker"], { encoding: "utf8" }).split("\n").filter(Boolean);
  } catch {
    return 0;
  }
  return pids.reduce((sum, pid) => sum + cpuSeconds(Number(pid)), 0);
}

/** A worker engine that costs nothing: only the gateway's own work is left to measure. */
function zeroCostEngine(): TranscriptionEngine {
  return {
    kind: "zero",
    formatsText: true,
    models: ["stt-1"],
    realTimeFactor: 0.01,
    concurrency: 1024,
    warm: () => true,
    transcribe: async (r) => ({ task: "transcribe", language: "en", duration: r.pcm.length / 16_000, text: "", segments: [], words: [] }),
    close: async () => undefined,
  };
}

/**
 * The server half runs in its own process (this file with --serve), so the load
 * generator does not share the gateway's event loop: it prints {baseUrl, keys} and
 * stops when its stdin closes.
 */
async function serveGateway() {
  const stack = await startStack({ WORKER_EMBEDDED: "none", LOG_LEVEL: "error" });
  const worker = await startWorkerService({ nats: stack.nats, engine: zeroCostEngine(), id: "zero-cost", heartbeatMs: 1000, logger: createLogger("error") });
  const keys: string[] = [];
  const perKey = 100; // pro allows 120 requests per minute per key
  const need = Math.ceil((REQUESTS * 2 + 400) / perKey);
  for (let i = 0; i < need; i++) keys.push((await stack.issueKey("pro", `bench-${i}`)).key);
  process.stdout.write(JSON.stringify({ baseUrl: stack.baseUrl, keys }) + "\n");
  process.stdin.resume();
  await new Promise((r) => process.stdin.on("end", r));
  await worker.stop();
  await stack.stop();
}

async function benchGateway() {
  const profile = process.env.BENCH_PROFILE_DIR ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
  const server = spawn(process.execPath, [...process.execArgv, ...profile, fileURLToPath(import.meta.url), "--serve"], {
    stdio: ["pipe", "pipe", "inherit"],
    env: process.env,
  });
  const first = await new Promise<string>((resolve, reject) => {
    createInterface({ input: server.stdout! }).once("line", resolve);
    server.once("exit", (code) => reject(new Error(`bench server exited (${code})`)));
  });
  const { baseUrl, keys } = JSON.parse(first) as { baseUrl: string; keys: string[] };
  try {
    let next = 0;
    const wav = encodeWav(new Int16Array(16_000).map((_, i) => Math.round(2000 * Math.sin(i / 7))));
    const mp3 = execFileSync("ffmpeg", ["-v", "error", "-f", "wav", "-i", "pipe:0", "-f", "mp3", "pipe:1"], { input: wav });

    const run = async (label: string, file: Uint8Array, name: string, total: number, concurrency = CONCURRENCY) => {
      const overhead: number[] = [];
      const handler: number[] = [];
      const latency: number[] = [];
      let issued = 0;
      const t0 = performance.now();
      const one = async () => {
        while (issued < total) {
          issued++;
          const key = keys[next++ % keys.length]!;
          const form = new FormData();
          form.set("file", new Blob([new Uint8Array(file)]), name);
          form.set("response_format", "json");
          const s = performance.now();
          const res = await fetch(`${baseUrl}/v1/audio/transcriptions`, { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
          await res.arrayBuffer();
          const ms = performance.now() - s;
          if (res.status !== 200) throw new Error(`${label}: HTTP ${res.status}`);
          const timing = res.headers.get("server-timing") ?? "";
          const worker = Number(/worker;dur=([\d.]+)/.exec(timing)?.[1] ?? 0);
          handler.push(Number(/total;dur=([\d.]+)/.exec(timing)?.[1] ?? 0) - worker);
          latency.push(ms);
          overhead.push(ms - worker);
        }
      };
      await Promise.all(Array.from({ length: concurrency }, one));
      const secs = (performance.now() - t0) / 1000;
      console.log(
        `  ${label.padEnd(30)} ${String(total).padStart(5)} req, concurrency ${concurrency}: ${(total / secs).toFixed(0)} req/s; ` +
          `latency p50 ${pct(latency, 50).toFixed(1)} ms p99 ${pct(latency, 99).toFixed(1)} ms; ` +
          `gateway overhead (latency − worker) p50 ${pct(overhead, 50).toFixed(1)} ms p99 ${pct(overhead, 99).toFixed(1)} ms ` +
          `(of which in the route handler, outside the worker: p50 ${pct(handler, 50).toFixed(1)} ms)`,
      );
    };
    console.log(`\n== Gateway overhead with a zero-cost worker (1 s clip, response_format json; server in its own process)`);
    await run("warm-up", wav, "clip.wav", 100);
    await run("WAV 16 kHz PCM16 (no ffmpeg)", wav, "clip.wav", Math.floor(REQUESTS / 3), 1);
    await run("WAV 16 kHz PCM16 (no ffmpeg)", wav, "clip.wav", REQUESTS);
    await run("MP3 (ffmpeg decode)", mp3, "clip.mp3", Math.max(50, Math.floor(REQUESTS / 10)), 1);
    await run("MP3 (ffmpeg decode)", mp3, "clip.mp3", Math.max(50, Math.floor(REQUESTS / 5)));
  } finally {
    server.stdin!.end();
    await new Promise((r) => server.once("exit", r));
  }
}

interface Round {
  reqPerSec: number;
  p50: number;
  p99: number;
  errors: number;
  /** p50 of the service's Server-Timing entries (ms), when it sent them. */
  timing: Record<string, number>;
}

/** `total` POSTs of `wav` to `url`, `concurrency` at a time, key `keys[lane]` per lane. */
async function postRound(url: string, keys: string[], wav: Uint8Array, total: number, concurrency: number): Promise<Round> {
  const latency: number[] = [];
  const timings: Record<string, number[]> = {};
  let errors = 0;
  let issued = 0;
  const t0 = performance.now();
  const lane = async (i: number) => {
    while (issued < total) {
      issued++;
      const form = new FormData();
      form.set("file", new Blob([new Uint8Array(wav)], { type: "audio/wav" }), "clip.wav");
      form.set("model", "whisper-1");
      form.set("response_format", "json");
      const s = performance.now();
      try {
        const res = await fetch(url, { method: "POST", body: form, headers: { authorization: `Bearer ${keys[i % keys.length]}` } });
        await res.arrayBuffer();
        if (res.status !== 200) errors++;
        for (const m of (res.headers.get("server-timing") ?? "").matchAll(/(\w+);dur=([\d.]+)/g)) (timings[m[1]!] ??= []).push(Number(m[2]));
      } catch {
        errors++;
      }
      latency.push(performance.now() - s);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, i) => lane(i)));
  const timing = Object.fromEntries(Object.entries(timings).map(([k, xs]) => [k, pct(xs, 50)]));
  return { reqPerSec: total / ((performance.now() - t0) / 1000), p50: pct(latency, 50), p99: pct(latency, 99), errors, timing };
}

/** Spawns `npx tsx <script>` and returns it with the `{url}` it prints on its first line. */
async function startZeroOpenAI(): Promise<{ proc: ReturnType<typeof spawn>; url: string }> {
  const proc = spawn(process.execPath, ["--import", "tsx", "bench/support/zero-openai.ts"], { stdio: ["ignore", "pipe", "inherit"] });
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).once("line", resolve);
    proc.once("exit", (code) => reject(new Error(`zero-cost server exited (${code})`)));
  });
  return { proc, url: (JSON.parse(line) as { url: string }).url };
}

async function benchSideBySide() {
  const deployment = new BenchDeployment();
  const zero = await startZeroOpenAI();
  const profile = process.env.BENCH_PROFILE_DIR ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
  const { proc: service, baseUrl: base } = await deployment.serve({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: zero.url, WORKER_OPENAI_CONCURRENCY: "64", RT_STREAM_DECODERS: "0" }, profile);
  try {
    // One key per client lane, its per-minute limit lifted so the bench measures cost, not refusals.
    const keys: string[] = [];
    for (let i = 0; i < CONCURRENCY; i++) keys.push(await deployment.issueKey(base, `bench-${i}`, { limits: { maxRequestsPerMinute: 1_000_000 } }));
    const wav = encodeWav(new Int16Array(16_000).map((_, i) => Math.round(2000 * Math.sin(i / 7))));
    const direct = `${zero.url}/v1/audio/transcriptions`;
    const through = `${base}/v1/audio/transcriptions`;
    // the worker announces itself warm after its first probe: wait for a 200
    for (let t = 0; (await postRound(through, keys, wav, 1, 1)).errors > 0; t++) {
      if (t > 100) throw new Error("the service never answered 200");
      await new Promise((r) => setTimeout(r, 100));
    }
    console.log(`\n== Side by side: 1 s WAV as multipart, response_format json, ${REQUESTS} requests per round; load ${loadAverage()}`);
    await postRound(direct, keys, wav, 200, CONCURRENCY);
    await postRound(through, keys, wav, 200, CONCURRENCY);
    const show = (label: string, r: Round, c: number) =>
      console.log(
        `  ${label.padEnd(8)} concurrency ${c}: ${r.reqPerSec.toFixed(0).padStart(4)} req/s, p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms, errors ${r.errors}` +
          (Object.keys(r.timing).length ? ` (Server-Timing p50: ${Object.entries(r.timing).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(", ")} ms)` : ""),
      );
    // CPU seconds the service process (and the zero-cost server) spent per request: less
    // sensitive to the machine's other load than requests per second
    const measured = async (pid: number, url: string, c: number) => {
      const before = cpuSeconds(pid);
      const r = await postRound(url, keys, wav, REQUESTS, c);
      return { ...r, cpuMs: ((cpuSeconds(pid) - before) * 1000) / REQUESTS };
    };
    const cpu = (r: { cpuMs: number }, who: string) => console.log(`           ${who} CPU per request: ${r.cpuMs.toFixed(2)} ms`);
    const d8 = await measured(zero.proc.pid!, direct, CONCURRENCY);
    show("direct", d8, CONCURRENCY);
    cpu(d8, "zero-cost server");
    const s8 = await measured(service.pid!, through, CONCURRENCY);
    show("service", s8, CONCURRENCY);
    cpu(s8, "service process");
    const d1 = await postRound(direct, keys, wav, REQUESTS, 1);
    show("direct", d1, 1);
    const s1 = await measured(service.pid!, through, 1);
    show("service", s1, 1);
    cpu(s1, "service process");
    const errors = d8.errors + s8.errors + d1.errors + s1.errors;
    console.log(
      `  service/direct at concurrency ${CONCURRENCY}: ${((s8.reqPerSec / d8.reqPerSec) * 100).toFixed(1)}% of the direct req/s; ` +
        `added p50 at concurrency 1: ${(s1.p50 - d1.p50).toFixed(2)} ms; errors: ${errors}; load ${loadAverage()}`,
    );
  } finally {
    await stopServer(service);
    zero.proc.kill("SIGTERM");
    await deployment.destroy();
  }
}

const loadAverage = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

if (process.argv.includes("--serve")) {
  await serveGateway();
  process.exit(0);
}
if (SIDE_BY_SIDE) {
  await benchSideBySide();
  process.exit(0);
}
if (!GATEWAY_ONLY) await benchEngine();
if (!AUDIO_ONLY) await benchGateway();
process.exit(0);
