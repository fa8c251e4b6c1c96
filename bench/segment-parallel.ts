/**
 * Long segment clips in parallel (docs/design/segment.md, "Long clips in parallel"):
 * `nice -n 19 npx tsx bench/segment-parallel.ts` (NATS and Postgres as for the tests).
 *
 * For real speech of 3 s (ldc93s1.wav), 11 s (jfk.wav), ~60 s and ~300 s (the labelled
 * clips one after another with 0.4 s pauses, test/support/long-speech.ts), it posts each
 * clip to POST /v1/audio/transcriptions of in-process services on the embedded engine:
 *
 * - "one": one ps-worker process (POCKETSPHINX_PROCESSES=1): one engine slot, so every
 *   clip takes the single-request path, as every clip did before;
 * - "all": one ps-worker process per core: clips from SEGMENT_SPLIT_MIN_SECONDS (8 s) are
 *   cut at pauses and their pieces decoded at once;
 * - "replicas" (BENCH_REPLICAS=n, 0 to skip; default 4): no engine in the service, n worker
 *   replicas (`stt serve` with STT_SERVICES=transcriber, BENCH_REPLICA_PROCESSES ps-worker
 *   processes each, default 1) reached through the worker registry over NATS, as
 *   separate machines would be.
 *
 * Requests alternate between the set-ups (one clip at a time, BENCH_ROUNDS rounds,
 * default 2), so they share the machine's load alike. Each row: wall time as the client
 * sees it, the engine's own CPU seconds for the request (the ps-worker processes' user +
 * system time, /proc), the cores they got on average (CPU ÷ wall: on a machine shared
 * with other work, what parallelism could reach), pieces, word error rate against the
 * clips' transcripts, and for "all" and "replicas" the wall time over "one"'s in the same
 * round (posted right after it, so under about the same load), median over the rounds.
 * "Busiest engine's CPU" is the CPU seconds of the engine process that worked longest on
 * the request: the wall time it would take with a core of its own per engine process; over
 * "one"'s engine CPU in the same round it is the ratio an unloaded machine would show
 * (less the slowdown of decoders sharing caches), which the machine's other load cannot
 * move as it moves the wall time. BENCH_CLIPS=3,11 limits the clips.
 */
import { loadavg } from "node:os";
import { availableParallelism } from "node:os";
import { readFileSync } from "node:fs";
import { encodeWav, pcm16MonoFromWav } from "../shared/audio/wav";
import { wordErrorRate } from "../shared/workers/wer";
import type { RunningRouter } from "../shared/workers/router";
import { fixturePath } from "../test/support/fixtures";
import { labelledSpeech } from "../test/support/long-speech";
import { startServiceProcess, type ServiceProcess } from "../test/support/service-process";
import { startStack, type Stack } from "../test/support/stack";
import { childPids, cpuSeconds, processTree } from "./support/proc";
import { recordResults, type ResultRow } from "./support/results";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const REPLICAS = Number(process.env.BENCH_REPLICAS ?? 4);
const REPLICA_PROCESSES = Number(process.env.BENCH_REPLICA_PROCESSES ?? 1);
const CLIPS = (process.env.BENCH_CLIPS ?? "3,11,60,300").split(",").map(Number);
const CORES = availableParallelism();

interface Setup {
  name: string;
  stack: Stack;
  key: string;
  /** The ps-worker processes that serve it. */
  engines: () => number[];
  replicas: ServiceProcess[];
}

interface Clip {
  label: string;
  wav: Uint8Array;
  seconds: number;
  reference: string;
}

function clips(): Clip[] {
  const fixture = (name: string, reference: string, label: string): Clip => {
    const pcm = pcm16MonoFromWav(readFileSync(fixturePath(name)))!;
    return { label, wav: encodeWav(pcm), seconds: pcm.length / 16_000, reference };
  };
  const long = (seconds: number): Clip => {
    const s = labelledSpeech(seconds);
    return { label: `${seconds} s`, wav: encodeWav(s.pcm), seconds: s.seconds, reference: s.reference };
  };
  const all: Record<number, () => Clip> = {
    3: () => fixture("ldc93s1.wav", "She had your dark suit in greasy wash water all year.", "3 s"),
    11: () => fixture("jfk.wav", "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.", "11 s"),
    60: () => long(60),
    300: () => long(300),
  };
  return CLIPS.map((s) => all[s]!());
}

const SERVICES = "projector,transcriber,http-gateway";

/** ps-worker processes among `pids`. */
const psWorkers = (pids: number[]) =>
  pids.filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "ps-worker";
    } catch {
      return false;
    }
  });

async function embedded(name: string, processes: number): Promise<Setup> {
  const before = new Set(psWorkers(childPids()));
  const stack = await startStack({ STT_SERVICES: SERVICES, POCKETSPHINX_PROCESSES: String(processes), LOG_LEVEL: "error" });
  const mine = psWorkers(childPids()).filter((pid) => !before.has(pid));
  return { name, stack, key: (await stack.issueKey("pro", `bench-${name}`)).key, engines: () => mine, replicas: [] };
}

async function replicated(n: number): Promise<Setup> {
  const stack = await startStack({ STT_SERVICES: SERVICES, WORKER_EMBEDDED: "none", LOG_LEVEL: "error" });
  const replicas: ServiceProcess[] = [];
  for (let i = 0; i < n; i++) {
    replicas.push(await startServiceProcess(stack, "transcriber", { WORKER_ID: `replica${i}`, POCKETSPHINX_PROCESSES: String(REPLICA_PROCESSES), RT_STREAM_DECODERS_WARM: "0" }));
  }
  const router = stack.runtime.ctx.router as RunningRouter;
  for (let t = 0; router.workers().filter((w) => w.warm).length < n; t++) {
    if (t > 600) throw new Error("the replicas' workers did not come up");
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    name: `${n} replicas`,
    stack,
    key: (await stack.issueKey("pro", "bench-replicas")).key,
    engines: () => psWorkers(replicas.flatMap((r) => processTree(r.proc.pid!))),
    replicas,
  };
}

interface Sample {
  wall: number;
  cpu: number;
  /** The busiest engine process's CPU seconds: the wall time with a core of its own each. */
  busiest: number;
  wer: number;
  pieces: number;
  workers: number;
}

async function measure(setup: Setup, clip: Clip): Promise<Sample> {
  const engines = setup.engines();
  const cpu0 = engines.map(cpuSeconds);
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(clip.wav)]), "clip.wav");
  form.set("response_format", "json");
  const t0 = performance.now();
  const res = await setup.stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${setup.key}` } });
  const body = (await res.json()) as { text: string };
  const wall = (performance.now() - t0) / 1000;
  if (res.status !== 200) throw new Error(`${setup.name} ${clip.label}: HTTP ${res.status} ${JSON.stringify(body)}`);
  const used = engines.map((pid, i) => cpuSeconds(pid) - cpu0[i]!);
  return {
    wall,
    cpu: used.reduce((a, b) => a + b, 0),
    busiest: Math.max(...used),
    wer: wordErrorRate(clip.reference, body.text).wer,
    pieces: Number(res.headers.get("x-segment-pieces")),
    workers: (res.headers.get("x-worker-id") ?? "").split(", ").length,
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** How the results file names each set-up (docs/benchmarks.md's series). */
const SETUP_LABELS = (name: string) =>
  name === "one" ? "one engine process" : name === "all" ? `one engine process per core (${CORES})` : `${REPLICAS} worker replicas over NATS (${REPLICA_PROCESSES} process each)`;

async function main() {
  console.log(`segment pieces bench: ${CORES} cores, load average ${loadavg().map((x) => x.toFixed(2)).join(" ")} at start, ${ROUNDS} rounds, ${new Date().toISOString()}`);
  const setups: Setup[] = [];
  const samples = new Map<string, Sample[]>();
  const all = clips();
  try {
    setups.push(await embedded("one", 1), await embedded("all", CORES));
    if (REPLICAS > 0) setups.push(await replicated(REPLICAS));
    // warm-up: every engine process has decoded once
    for (const s of setups) await measure(s, all[0]!);
    for (let round = 0; round < ROUNDS; round++) {
      for (const clip of all) {
        for (const s of setups) {
          const sample = await measure(s, clip);
          const key = `${clip.label}|${s.name}`;
          samples.set(key, [...(samples.get(key) ?? []), sample]);
          console.log(
            `  round ${round + 1} ${clip.label.padStart(6)} ${s.name.padEnd(10)} wall ${sample.wall.toFixed(2).padStart(6)} s  engine CPU ${sample.cpu.toFixed(2).padStart(6)} s (busiest ${sample.busiest.toFixed(2)})  ` +
              `pieces ${String(sample.pieces).padStart(2)} on ${sample.workers} worker(s)  WER ${(sample.wer * 100).toFixed(1)}%  (load ${loadavg()[0]!.toFixed(2)})`,
          );
        }
      }
    }
  } finally {
    console.log(
      `\n| clip | set-up | wall (s, median of ${ROUNDS}) | engine CPU (s) | busiest engine's CPU (s) | cores the engines got | pieces | WER | wall ÷ one's in the same round (median) | busiest CPU ÷ one's CPU (median) |`,
    );
    console.log("|---|---|---|---|---|---|---|---|---|---|");
    const rows: ResultRow[] = [];
    for (const clip of all) {
      const oneSamples = samples.get(`${clip.label}|one`) ?? [];
      const ones = oneSamples.map((x) => x.wall);
      for (const s of setups) {
        const xs = samples.get(`${clip.label}|${s.name}`) ?? [];
        if (!xs.length) continue;
        const wall = median(xs.map((x) => x.wall));
        // each round's request against "one"'s of the same round (posted just before it, under the same load)
        const paired = xs.filter((_, i) => i < ones.length).map((x, i) => x.wall / ones[i]!);
        // load-independent: what the wall time would be with a core per engine, over one engine's
        const critical = xs.filter((_, i) => i < oneSamples.length).map((x, i) => x.busiest / oneSamples[i]!.cpu);
        console.log(
          `| ${clip.label} (${clip.seconds.toFixed(1)} s) | ${s.name} | ${wall.toFixed(2)} (${xs.map((x) => x.wall.toFixed(2)).join(", ")}) | ${median(xs.map((x) => x.cpu)).toFixed(2)} | ${median(xs.map((x) => x.busiest)).toFixed(2)} | ` +
            `${median(xs.map((x) => x.cpu / x.wall)).toFixed(2)} | ` +
            `${xs[0]!.pieces} | ${(median(xs.map((x) => x.wer)) * 100).toFixed(1)}% | ${s.name === "one" ? "1" : `${median(paired).toFixed(2)} (${paired.map((r) => r.toFixed(2)).join(", ")})`} | ` +
            `${s.name === "one" ? "1" : `${median(critical).toFixed(2)} (${critical.map((r) => r.toFixed(2)).join(", ")})`} |`,
        );
        rows.push({ clip: clip.label, clip_seconds: Number(clip.seconds.toFixed(1)), setup: s.name, setup_label: SETUP_LABELS(s.name), wall_s: Number(wall.toFixed(2)), engine_cpu_s: Number(median(xs.map((x) => x.cpu)).toFixed(2)), pieces: xs[0]!.pieces, wer_pct: Number((median(xs.map((x) => x.wer)) * 100).toFixed(1)) });
      }
    }
    console.log(`load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
    recordResults("segment-parallel", rows);
    for (const s of setups) {
      for (const r of s.replicas) await r.stop();
      await s.stack.stop();
    }
  }
}

await main();
