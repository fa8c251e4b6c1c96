import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { attemptTimeoutMs, type RunningRouter } from "../shared/workers/router";
import { fixturePath } from "./support/fixtures";
import { waitFor } from "./support/jobs-helpers";
import { spawnService, stackChildEnv, type ServiceProcess } from "./support/service-process";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";
import { writeTinyWhisperModel, type TinyWhisperModel } from "./support/workers-whisper-model";

/**
 * whisper.cpp in its own `stt serve` process, as an operator runs a worker host
 * (STT_SERVICES=transcriber, WHISPER_MODEL_PATH), on a model the test writes, beside a
 * stack that runs no engine and has a fallback provider (a local HTTP server).
 *
 * - Start-up: a missing, truncated or non-ggml model file stops `stt serve` with exit
 *   code 1 and a message naming the file and what is wrong, never a crash.
 * - Routing, as test/workers-frozen.test.ts does it for PocketSphinx (docs/workers.md,
 *   rules 2 to 5): the worker answers over NATS; an engine error goes to the fallback;
 *   the whole worker process stopped (SIGSTOP) times out on time, the fallback answers,
 *   the worker is left out until it heartbeats again after SIGCONT.
 */
const WORKER = "frozen-whisper-cpp";
const CLIP_SECONDS = 2.925;

let dir: string;
let model: TinyWhisperModel;
let stack: Stack;
let provider: ProviderServer;
let key: string;
let clip: Buffer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "whisper-process-"));
  model = await writeTinyWhisperModel(join(dir, "ggml-tiny-random.bin"), { multilingual: true });
  provider = await startProviderServer("fallback");
  stack = await startStack({ WORKER_EMBEDDED: "none", FALLBACK_OPENAI_URL: provider.url, RT_STREAM_DECODERS_WARM: "0" });
  key = (await stack.issueKey("pro", "whisper-process")).key;
  clip = await readFile(fixturePath("ldc93s1.wav"));
});
afterAll(async () => {
  await stack?.stop();
  await provider?.close();
  await rm(dir, { recursive: true, force: true });
});

/** `stt serve` running the transcriber alone on the stack's NATS and Postgres, with whisper.cpp on `modelPath`. */
const serveWhisper = (modelPath: string) =>
  spawnService({ ...stackChildEnv(stack), STT_SERVICES: "transcriber", WORKER_EMBEDDED: "none", WHISPER_MODEL_PATH: modelPath, WORKER_ID: "frozen" }, { timeoutMs: 60_000 });

describe("start-up with a bad WHISPER_MODEL_PATH", () => {
  it("a missing, truncated or non-ggml file stops stt serve with exit code 1 and a message naming the file", async () => {
    const full = await readFile(model.path);
    const truncated = join(dir, "truncated.bin");
    await writeFile(truncated, full.subarray(0, model.tensorsOffset - 1000));
    const notGgml = join(dir, "model.safetensors");
    await writeFile(notGgml, randomBytes(64 * 1024));
    const cases: [string, RegExp][] = [
      [join(dir, "missing.bin"), /whisper_model_missing|is not a readable file/],
      [truncated, /the file ends at byte \d+, inside its vocabulary/],
      [notGgml, /does not start with the ggml magic/],
    ];
    const outcomes = await Promise.all(cases.map(([path]) => serveWhisper(path).then((p) => p.kill().then(() => "started"), (err: Error) => err.message)));
    for (const [i, [path, why]] of cases.entries()) {
      const out = outcomes[i]!;
      expect(out, out).toMatch(/^transcriber process exited 1:/);
      expect(out).toContain(`WHISPER_MODEL_PATH ${path}`);
      expect(out).toMatch(why);
      expect(out).not.toMatch(/Segmentation fault|core dumped|Aborted/);
    }
  });
});

describe("a whisper.cpp worker in its own process", () => {
  let child: ServiceProcess;
  const router = () => stack.runtime.ctx.router as RunningRouter;
  const announced = () => router().workers().find((w) => w.id === WORKER);
  const transcribe = async (fields: Record<string, string> = {}) => {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(clip)]), "ldc93s1.wav");
    form.set("response_format", "json");
    form.set("worker_id", WORKER);
    for (const [k, v] of Object.entries(fields)) form.set(k, v);
    const t0 = Date.now();
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form, signal: AbortSignal.timeout(120_000) });
    const body = (await res.json().catch(() => null)) as any;
    return { status: res.status, ms: Date.now() - t0, workerId: res.headers.get("x-worker-id"), fallback: res.headers.get("x-fallback-used"), body };
  };

  beforeAll(async () => {
    child = await serveWhisper(model.path);
    await waitFor(async () => announced()?.warm, { timeoutMs: 30_000, what: "the child's whisper worker warm" });
  }, 90_000);
  afterAll(async () => {
    if (child && child.proc.exitCode === null) child.proc.kill("SIGCONT");
    await child?.stop();
  });

  it("answers over NATS; an engine error goes to the fallback", async () => {
    expect(announced()).toMatchObject({ kind: "whisper-cpp", languages: ["*"], concurrency: 1 });
    const first = await transcribe();
    expect(first, JSON.stringify(first.body)).toMatchObject({ status: 200, workerId: WORKER, fallback: "0" });
    expect(typeof first.body.text).toBe("string");
    const calls = provider.requests.length;
    const unknown = await transcribe({ language: "xx" });
    expect(unknown).toMatchObject({ status: 200, workerId: "fallback", fallback: "1", body: { text: "fallback heard 2.92 seconds" } });
    expect(provider.requests.length).toBe(calls + 1);
    // an engine's answer is not a frozen worker: it stays in rotation
    expect(router().rotation().leftOut).not.toContain(WORKER);
    expect(await transcribe()).toMatchObject({ status: 200, workerId: WORKER, fallback: "0" });
  });

  it("stopped (SIGSTOP): the attempt times out on time, the fallback answers, and the worker stays out until it heartbeats", { timeout: 120_000 }, async () => {
    // in rotation, and announcing no clip in flight (a heartbeat sent during the last
    // request would lengthen the attempt by the queue it reports, rule 4)
    await waitFor(async () => announced()?.warm && announced()!.inFlight === 0 && !router().rotation().leftOut.includes(WORKER), { timeoutMs: 30_000, what: "the worker idle in rotation" });
    const bound = attemptTimeoutMs(stack.config.workers.attemptTimeoutMs, CLIP_SECONDS, announced()!.realTimeFactor);
    const calls = provider.requests.length;
    child.proc.kill("SIGSTOP");
    try {
      const first = await transcribe();
      expect(first, JSON.stringify(first.body)).toMatchObject({ status: 200, workerId: "fallback", fallback: "1" });
      expect(provider.requests.length).toBe(calls + 1);
      // it waited out the worker's attempt, and not much longer
      expect(first.ms).toBeGreaterThanOrEqual(bound);
      expect(first.ms).toBeLessThan(bound + 8000);
      console.log(`stopped whisper worker: fallback answered after ${first.ms} ms (attempt timeout ${bound} ms)`);
      expect(router().rotation().leftOut).toContain(WORKER);
      // the next request does not wait on it again
      const second = await transcribe();
      expect(second).toMatchObject({ status: 200, workerId: "fallback", fallback: "1" });
      expect(second.ms).toBeLessThan(bound);
    } finally {
      child.proc.kill("SIGCONT");
    }
    await waitFor(async () => router().rotation().warm.includes(WORKER) && !router().rotation().leftOut.includes(WORKER), { timeoutMs: 30_000, what: "the worker back in rotation" });
    expect(await transcribe()).toMatchObject({ status: 200, workerId: WORKER, fallback: "0" });
  });
});
