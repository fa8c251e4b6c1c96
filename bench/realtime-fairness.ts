/**
 * Fairness round of the realtime commit path (docs/realtime.md, "Capacity and
 * fairness"): one owner holding most of the sessions beside one owner with two, all
 * streaming real speech (jfk.wav + 1.5 s of silence, looped) in real time against
 * `stt serve` (all services, embedded PocketSphinx) in a separate process.
 *
 *   npx tsx bench/realtime-fairness.ts [--big 18] [--seconds 30] [--ps-processes 1]
 *                                      [--max-wait-ms 5000]
 *                                      [--provider-ms 400 --provider-concurrency 1]
 *
 * With `--provider-ms` the engine is not PocketSphinx but a local OpenAI-compatible
 * server (test/support/workers-provider-server.ts) answering after that many ms,
 * announced with `--provider-concurrency`: capacity independent of the machine's load,
 * so the round shows the scheduler alone.
 *
 * Round 1: the small owner's two sessions alone (its solo figure). Round 2: the same
 * beside `--big` sessions of the big owner (default 18: 90% of 20). Per round: the
 * small owner's final latency (completed − speech_stopped, engine included) p50/p99,
 * and for everybody the committed utterances that completed, failed engine_overloaded,
 * failed otherwise, or got no outcome at all (must be 0: never a silent wait), plus
 * items that got more than one outcome (must be 0).
 */
import type { ChildProcess } from "node:child_process";
import { BenchDeployment } from "./support/deployment";
import { pct, stopServer } from "./support/server";
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import WebSocket from "ws";
import { pcm16MonoFromWav } from "../shared/audio/wav";
import { fixturePath } from "../test/support/fixtures";
import { startProviderServer } from "../test/support/workers-provider-server";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const bigSessions = Number(args.get("big") ?? 18);
const seconds = Number(args.get("seconds") ?? 30);
const psProcesses = args.get("ps-processes") ?? "1";
const maxWaitMs = args.get("max-wait-ms") ?? "5000";
/** Engine = a local OpenAI-compatible server taking this long per request (deterministic capacity). */
const providerMs = args.get("provider-ms");
const providerConcurrency = args.get("provider-concurrency") ?? "1";
const frameMs = 40;

async function startServer(deployment: BenchDeployment, engineUrl?: string): Promise<ChildProcess & { port: number }> {
  const engine = engineUrl
    ? { WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: `${engineUrl}/v1`, WORKER_OPENAI_MODEL: "whisper-1", WORKER_OPENAI_CONCURRENCY: providerConcurrency, WORKER_OPENAI_REAL_TIME_FACTOR: "1" }
    : {};
  const { proc, port } = await deployment.serve({ POCKETSPHINX_PROCESSES: psProcesses, RT_MAX_TRANSCRIPT_WAIT_MS: maxWaitMs, ...engine });
  return Object.assign(proc, { port });
}


interface Run {
  owner: string;
  ws: WebSocket;
  refused?: string;
  events: { type: string; t: number; item_id?: string; code?: string }[];
  closed: Promise<void>;
}

function openSession(port: number, key: string, owner: string): Promise<Run> {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/audio/transcriptions/stream`, { headers: { authorization: `Bearer ${key}` } });
  const run: Run = { owner, ws, events: [], closed: new Promise((r) => ws.on("close", () => r()).on("error", () => r())) };
  ws.on("message", (data) => {
    const e = JSON.parse(data.toString());
    run.events.push({ type: e.type, t: performance.now(), item_id: e.item_id, code: e.error?.code });
  });
  return new Promise((resolve) => {
    ws.once("open", () => resolve(run));
    ws.once("error", () => resolve(run));
    ws.once("unexpected-response", (_req, res) => {
      run.refused = String(res.statusCode);
      resolve(run);
    });
  });
}

async function round(label: string, big: number) {
  const deployment = new BenchDeployment(`b${label}`);
  const provider = providerMs ? await startProviderServer("engine") : undefined;
  if (provider) provider.behaviour.delayMs = Number(providerMs);
  const server = await startServer(deployment, provider?.url);
  try {
    const baseUrl = `http://127.0.0.1:${server.port}`;
    const smallKey = await deployment.issueKey(baseUrl, "small");
    const bigKeys = await Promise.all(Array.from({ length: Math.ceil(big / 10) }, () => deployment.issueKey(baseUrl, "big")));
    await new Promise((r) => setTimeout(r, 2000)); // the engine announces itself
    const runs = [
      ...(await Promise.all([0, 1].map(() => openSession(server.port!, smallKey, "small")))),
      ...(await Promise.all(Array.from({ length: big }, (_, i) => openSession(server.port!, bigKeys[Math.floor(i / 10)]!, "big")))),
    ];
    const jfk = pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!;
    const loop = new Int16Array(jfk.length + 24000);
    loop.set(jfk);
    const bytes = new Uint8Array(loop.buffer);
    const frame = (16000 * 2 * frameMs) / 1000;
    const open = runs.filter((r) => r.ws.readyState === WebSocket.OPEN);
    const offsets = open.map(() => Math.floor(Math.random() * (bytes.length / frame)) * frame);
    const start = performance.now();
    let ticks = 0;
    await new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        const due = Math.floor((performance.now() - start) / frameMs);
        for (; ticks < due; ticks++) {
          open.forEach((r, i) => {
            const from = (offsets[i]! + ticks * frame) % bytes.length;
            if (r.ws.readyState === WebSocket.OPEN) r.ws.send(bytes.subarray(from, Math.min(bytes.length, from + frame)));
          });
        }
        if (performance.now() - start >= seconds * 1000) {
          clearInterval(timer);
          resolve();
        }
      }, frameMs / 2);
    });
    for (const r of open) r.ws.send(JSON.stringify({ type: "session.close" }));
    await Promise.race([Promise.all(open.map((r) => r.closed)), new Promise((r) => setTimeout(r, 30_000))]);

    const small: number[] = [];
    const tally = { committed: 0, completed: 0, overloaded: 0, otherFailed: 0, silent: 0, twice: 0 };
    for (const r of open) {
      for (const c of r.events.filter((e) => e.type === "input_audio_buffer.committed")) {
        tally.committed++;
        const outcomes = r.events.filter((e) => e.item_id === c.item_id && (e.type.endsWith("transcription.completed") || e.type.endsWith("transcription.failed")));
        if (outcomes.length === 0) tally.silent++;
        if (outcomes.length > 1) tally.twice++;
        const o = outcomes[0];
        if (!o) continue;
        if (o.type.endsWith("completed")) tally.completed++;
        else if (o.code === "engine_overloaded") tally.overloaded++;
        else tally.otherFailed++;
        const stopped = r.events.find((e) => e.type === "input_audio_buffer.speech_stopped" && e.item_id === c.item_id);
        if (r.owner === "small" && stopped && o.type.endsWith("completed")) small.push(o.t - stopped.t);
      }
    }
    const refused = runs.filter((r) => r.refused).length;
    return { small, tally, refused, sessions: open.length };
  } finally {
    await stopServer(server);
    await provider?.close();
    await deployment.destroy();
  }
}

async function main() {
  const engine = providerMs ? `local provider ${providerMs} ms/request × ${providerConcurrency}` : `PocketSphinx processes ${psProcesses}`;
  console.log(`realtime fairness bench: ${seconds} s of speech per session, ${engine}, RT_MAX_TRANSCRIPT_WAIT_MS ${maxWaitMs}, load average ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);
  console.log("round | sessions (small+big) | refused | small owner final p50/p99 | committed | completed | engine_overloaded | other failed | no outcome | >1 outcome");
  const show = (label: string, r: Awaited<ReturnType<typeof round>>) =>
    console.log([label, r.sessions, r.refused, `${pct(r.small, 50).toFixed(0)}/${pct(r.small, 99).toFixed(0)} ms (${r.small.length})`, r.tally.committed, r.tally.completed, r.tally.overloaded, r.tally.otherFailed, r.tally.silent, r.tally.twice].join(" | "));
  const solo = await round("solo", 0);
  show("solo", solo);
  const load = await round("load", bigSessions);
  show(`2 + ${bigSessions}`, load);
  console.log(`load average at the end: ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);
  console.log(`small owner's final p99 under load ÷ solo: ${(pct(load.small, 99) / pct(solo.small, 99)).toFixed(2)}×`);
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
