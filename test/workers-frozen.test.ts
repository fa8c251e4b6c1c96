import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav } from "../shared/audio/wav";
import { attemptTimeoutMs } from "../shared/workers/router";
import type { RunningRouter } from "../shared/workers/router";
import { waitFor } from "./support/jobs-helpers";
import { fixture } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { stackChildEnv } from "./support/service-process";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * docs/workers.md, routing rules 4 and 5: a frozen worker (SIGSTOP) holds no request
 * past its documented bound and is left out of rotation until it runs again.
 *
 * The worker is a real `transcriber` runtime in its own OS process (PocketSphinx, two
 * ps-worker processes) on the stack's NATS prefix; the stack itself runs no engine and
 * has a fallback provider (a local HTTP server). Requests pin the child's worker.
 *
 * - One of its ps-worker processes stopped: the clip goes to the other process within
 *   the accept bound (WORKER_ATTEMPT_TIMEOUT_MS), the worker answers (no fallback, so no
 *   attempt timed out), announces one process fewer until the stopped one runs and
 *   answers again.
 * - The whole worker process stopped: its heartbeats stop too, so the router stops
 *   waiting once its registry entry is stale (3 heartbeats + 1 s, before the documented
 *   per-attempt timeout of this clip), the fallback answers, the worker is left out (the
 *   next request goes to the fallback at once) until its next heartbeat after SIGCONT.
 */
const WORKER = "frozen-pocketsphinx";
const CLIP_SECONDS = 3;
const clip = encodeWav(fixture("jfk.wav").subarray(0, CLIP_SECONDS * 16_000));

let stack: Stack;
let provider: ProviderServer;
let child: ChildProcess;
let key: string;
let childOutput = "";

const router = () => stack.runtime.ctx.router as RunningRouter;
const announced = () => router().workers().find((w) => w.id === WORKER);

/** Pids of the child's ps-worker processes (its direct children named ps-worker). */
function psWorkers(pid: number): number[] {
  const kids = readdirSync(`/proc/${pid}/task`).flatMap((tid) => readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number));
  return kids.filter((k) => readFileSync(`/proc/${k}/comm`, "utf8").trim() === "ps-worker").sort((a, b) => a - b);
}

async function transcribe(): Promise<{ status: number; ms: number; workerId: string | null; fallback: string | null; body: any }> {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(clip)]), "clip.wav");
  form.set("response_format", "json");
  form.set("worker_id", WORKER);
  const t0 = Date.now();
  const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form, signal: AbortSignal.timeout(120_000) });
  const body = await res.json().catch(() => null);
  return { status: res.status, ms: Date.now() - t0, workerId: res.headers.get("x-worker-id"), fallback: res.headers.get("x-fallback-used"), body };
}

beforeAll(async () => {
  provider = await startProviderServer("fallback");
  stack = await startStack({ WORKER_EMBEDDED: "none", FALLBACK_OPENAI_URL: provider.url, FALLBACK_REAL_TIME_FACTOR: "0.1", RT_STREAM_DECODERS_WARM: "0" });
  child = spawn(process.execPath, ["--import", "tsx", "test/support/child-runtime.ts"], {
    env: {
      ...process.env,
      STT_SERVICES: "transcriber",
      WORKER_ID: "frozen",
      POCKETSPHINX_PROCESSES: "2",
      // as slow as two shared, busy cores make it (first clips ran at 3–5× real time):
      // the attempt bound follows (workers.md rule 4), so a timeout means frozen
      POCKETSPHINX_REAL_TIME_FACTOR: "5",
      ...stackChildEnv(stack),
      LOG_LEVEL: "warn",
      PORT: "0",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stderr!.on("data", (d: Buffer) => (childOutput += d.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (d: Buffer) => {
      childOutput += d.toString();
      if (d.toString().includes("ready")) resolve();
    });
    child.on("exit", (code) => reject(new Error(`worker process exited early (${code}): ${childOutput}`)));
  });
  await waitFor(async () => announced()?.warm && announced()!.concurrency === 2, { timeoutMs: 60_000, what: "the child's worker warm with 2 processes" });
  key = (await stack.issueKey("pro", "frozen-test")).key;
}, 180_000);

afterAll(async () => {
  if (child && child.exitCode === null) {
    child.kill("SIGCONT");
    child.kill("SIGKILL");
  }
  await stack?.stop();
  await provider?.close();
}, 60_000);

describe("a frozen worker", () => {
  it("a stopped ps-worker process: the clip moves to the next process, and the process stays out until it answers", { timeout: 240_000 }, async () => {
    await waitFor(async () => announced()?.warm && announced()!.concurrency === 2, { timeoutMs: 60_000, what: "both processes in rotation" });
    const bound = attemptTimeoutMs(stack.config.workers.attemptTimeoutMs, CLIP_SECONDS, announced()!.realTimeFactor);
    /** Answered by the worker, or (its attempt timed out) by the fallback: within the attempt's bound either way. */
    const answeredInTime = (a: Awaited<ReturnType<typeof transcribe>>) => {
      expect(a.status, JSON.stringify(a.body)).toBe(200);
      expect([WORKER, "fallback"]).toContain(a.workerId);
      expect(a.ms).toBeLessThan(bound + 8000);
    };
    // The pool hands a clip to its first free process: the first spawned (lowest pid).
    const [frozen] = psWorkers(child.pid!);
    expect(frozen).toBeGreaterThan(0);
    process.kill(frozen!, "SIGSTOP");
    try {
      // One at a time meets the stopped process first; should it not, two at once do.
      for (let round = 0; round < 6 && announced()?.concurrency !== 1; round++) {
        const answers = round < 2 ? [await transcribe()] : await Promise.all([transcribe(), transcribe()]);
        answers.forEach(answeredInTime);
        console.log(`stopped ps-worker, round ${round}: ${answers.map((a) => `${a.workerId} ${a.ms} ms`).join(", ")} (attempt bound ${bound} ms)`);
        // the first one met it: the clip moved to the other process and the worker answered
        if (round === 0) expect(answers[0], childOutput.split("\n").slice(-20).join("\n")).toMatchObject({ workerId: WORKER, fallback: "0" });
        await waitFor(async () => announced()?.concurrency === 1, { timeoutMs: 8000, what: "a heartbeat" }).catch(() => undefined);
      }
      expect(announced()?.concurrency).toBe(1);
      expect(childOutput).toMatch(/did not take a clip within 800 ms; left out of rotation until it answers/);
      // left out: later clips are served by the other process alone, none waits on the stopped one
      for (let i = 0; i < 2; i++) expect(await transcribe()).toMatchObject({ status: 200, workerId: WORKER, fallback: "0" });
      expect(announced()?.concurrency).toBe(1);
    } finally {
      process.kill(frozen!, "SIGCONT");
    }
    // It answers what it was sent (then discarded) and is back in rotation.
    await waitFor(async () => announced()?.concurrency === 2, { timeoutMs: 60_000, what: "the process back in rotation" });
    expect(childOutput).toMatch(/pocketsphinx process answered again; back in rotation/);
    expect(await transcribe()).toMatchObject({ status: 200, workerId: WORKER, fallback: "0" });
  });

  it("a stopped worker process: the router stops waiting when its heartbeats stop, the fallback answers, and the worker stays out until it heartbeats", { timeout: 240_000 }, async () => {
    await waitFor(async () => announced()?.warm, { timeoutMs: 60_000, what: "the worker warm" });
    const before = announced();
    const bound = attemptTimeoutMs(stack.config.workers.attemptTimeoutMs, CLIP_SECONDS, before!.realTimeFactor);
    // The router's staleness bound (services/stt/runtime.ts), checked every quarter of it;
    // the child heartbeats at the default 2 s, so its last one is at most that old.
    const staleMs = 3 * stack.config.workers.heartbeatMs + 1000;
    const giveUpMs = Math.min(bound, staleMs * 1.25);
    const fallbackCalls = provider.requests.length;
    child.kill("SIGSTOP");
    try {
      const first = await transcribe();
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      expect(first).toMatchObject({ workerId: "fallback", fallback: "1" });
      expect(provider.requests.length).toBe(fallbackCalls + 1);
      // It waited until the worker's entry went stale, and not much longer (the margin
      // covers upload, decode and the fallback on two busy cores), not the attempt's timeout.
      expect(first.ms).toBeGreaterThanOrEqual(Math.min(bound, staleMs - 2000));
      expect(first.ms).toBeLessThan(giveUpMs + 8000);
      console.log(`stopped worker process: fallback answered after ${first.ms} ms (stale after ${staleMs} ms; attempt timeout ${bound} ms)`);
      // Left out of rotation; readiness names it and still serves through the fallback.
      expect(router().rotation().leftOut).toContain(WORKER);
      const ready = (await (await stack.fetch("/readyz")).json()) as any;
      expect(ready.checks.segment).toMatchObject({ ok: true, detail: expect.stringContaining(WORKER) });
      // The next request does not wait on it again.
      const second = await transcribe();
      expect(second).toMatchObject({ status: 200, workerId: "fallback", fallback: "1" });
      expect(second.ms).toBeLessThan(bound);
      console.log(`stopped worker left out: the next request answered by the fallback in ${second.ms} ms`);
    } finally {
      child.kill("SIGCONT");
    }
    // Running again, it heartbeats and is back in rotation.
    await waitFor(async () => router().rotation().warm.includes(WORKER) && !router().rotation().leftOut.includes(WORKER), { timeoutMs: 30_000, what: "the worker back in rotation" });
    expect(await transcribe()).toMatchObject({ status: 200, workerId: WORKER, fallback: "0" });
  });
});
