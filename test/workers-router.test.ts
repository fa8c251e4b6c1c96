import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { createOpenAIEngine } from "../services/transcriber/openai-engine";
import { startWorkerService, type RunningWorker } from "../services/transcriber/worker-service";
import { decodeAudio } from "../shared/audio/decode";
import { createLogger } from "../shared/logger";
import { connectNats, destroyTopology, type Nats } from "../shared/nats";
import { workerReply } from "../schemas/segment";
import { encodeWorkerRequest } from "../shared/workers/protocol";
import { attemptTimeoutMs, createWorkerRouter, type RunningRouter } from "../shared/workers/router";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

const logger = createLogger("error");
const HEARTBEAT = 200;
/** Scheduling slack on top of the spec's 1.6 s for loaded CI machines (both slow servers take 3 s). */
const SLACK_MS = 800;
const second = new Int16Array(16_000).map((_, i) => Math.round(3000 * Math.sin(i / 5)));

describe("worker router over the NATS registry (real NATS, real HTTP providers)", () => {
  let nats: Nats;
  let primaryA: ProviderServer;
  let primaryB: ProviderServer;
  let fallback: ProviderServer;
  const workers: RunningWorker[] = [];
  let router: RunningRouter;
  let noFallbackRouter: RunningRouter;

  const startOpenAIWorker = async (server: ProviderServer, id: string) => {
    const engine = await createOpenAIEngine({ url: server.url, apiKey: "sk-upstream-secret", realTimeFactor: 0.05, probeMs: 100 });
    const w = await startWorkerService({ nats, engine, id, heartbeatMs: HEARTBEAT, logger });
    workers.push(w);
    return w;
  };
  const waitFor = async (cond: () => boolean, ms = 3000) => {
    const until = Date.now() + ms;
    while (!cond()) {
      if (Date.now() > until) throw new Error("condition not reached");
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  beforeAll(async () => {
    nats = await connectNats({ url: process.env.NATS_URL ?? "nats://127.0.0.1:4222", prefix: `t${randomBytes(4).toString("hex")}` });
    [primaryA, primaryB, fallback] = await Promise.all([startProviderServer("primary-a"), startProviderServer("primary-b"), startProviderServer("fallback")]);
    await startOpenAIWorker(primaryA, "worker-a");
    await startOpenAIWorker(primaryB, "worker-b");
    // The workers run in this process: these routers post to them over NATS all the same
    // (the path between processes); the in-process call has its own test below.
    router = await createWorkerRouter({ nats, budgetMs: 800, staleMs: 5000, fallback: { url: fallback.url, apiKey: "sk-fallback-secret" }, logger, localWorkers: false });
    noFallbackRouter = await createWorkerRouter({ nats, budgetMs: 800, staleMs: 5000, logger, localWorkers: false });
    await waitFor(() => router.workers().filter((w) => w.warm).length === 2);
  });

  afterAll(async () => {
    await router?.stop();
    await noFallbackRouter?.stop();
    for (const w of workers) await w.stop();
    await Promise.all([primaryA, primaryB, fallback].map((s) => s?.close()));
    if (nats) {
      await destroyTopology(nats);
      await nats.close();
    }
  });

  // A worker whose attempt timed out is left out until its next heartbeat (routing rule 5):
  // each case starts with every worker back in rotation.
  const reset = async () => {
    for (const s of [primaryA, primaryB, fallback]) {
      s.requests.length = 0;
      s.behaviour = { delayMs: 0, cold: false };
    }
    await waitFor(() => [router, noFallbackRouter].every((r) => r.rotation().leftOut.length === 0));
  };


  it("warm path: a warm primary answers, the clip arrives whole, no fallback", async () => {
    await reset();
    const r = await router.transcribe({ pcm: second, model: "stt-1", language: "en", prompt: "hello" });
    expect(r.fallbackUsed).toBe(false);
    expect(["worker-a", "worker-b"]).toContain(r.workerId);
    expect(r.result.text).toMatch(/^primary-[ab] heard 1\.00 seconds$/);
    expect(r.result.words.length).toBeGreaterThan(0);
    const got = [...primaryA.requests, ...primaryB.requests];
    expect(got).toHaveLength(1);
    expect(got[0]).toMatchObject({ samples: 16_000, language: "en", prompt: "hello", auth: "Bearer sk-upstream-secret" });
    expect(fallback.requests).toHaveLength(0);
  });

  it("worker_id pins the worker", async () => {
    await reset();
    for (let i = 0; i < 4; i++) {
      const r = await router.transcribe({ pcm: second, workerId: "worker-b" });
      expect(r.workerId).toBe("worker-b");
      expect(r.result.text.startsWith("primary-b")).toBe(true);
    }
    expect(primaryA.requests).toHaveLength(0);
    expect(primaryB.requests).toHaveLength(4);
  });

  it("cold primary is not posted: the fallback answers", async () => {
    await reset();
    primaryB.behaviour.cold = true;
    await waitFor(() => router.workers().find((w) => w.id === "worker-b")?.warm === false);
    const r = await router.transcribe({ pcm: second, workerId: "worker-b" });
    expect(r.fallbackUsed).toBe(true);
    expect(r.workerId).toBe("fallback");
    expect(r.result.text).toBe("fallback heard 1.00 seconds");
    expect(primaryB.requests).toHaveLength(0);
    expect(fallback.requests[0]?.auth).toBe("Bearer sk-fallback-secret");
    primaryB.behaviour.cold = false;
    await waitFor(() => router.workers().find((w) => w.id === "worker-b")?.warm === true);
  });

  it("unknown pinned worker falls back too", async () => {
    await reset();
    const r = await router.transcribe({ pcm: second, workerId: "no-such-worker" });
    expect(r.fallbackUsed).toBe(true);
  });

  it("primary timeout → fallback within the ~1.6 s budget", async () => {
    await reset();
    primaryA.behaviour.delayMs = 3000;
    const t0 = performance.now();
    const r = await router.transcribe({ pcm: second, workerId: "worker-a" });
    const elapsed = performance.now() - t0;
    expect(r.fallbackUsed).toBe(true);
    expect(r.result.text).toBe("fallback heard 1.00 seconds");
    expect(primaryA.requests).toHaveLength(1);
    expect(elapsed).toBeGreaterThanOrEqual(790);
    // The budget is 1.6 s (measured here: ~830 ms); the slack is for a CI machine whose
    // two cores are busy with other suites. The slow primary alone would take 3 s.
    console.log(`primary timeout → fallback in ${elapsed.toFixed(0)} ms`);
    expect(elapsed).toBeLessThan(1600 + SLACK_MS);
  });

  it("primary failure → fallback", async () => {
    await reset();
    primaryA.behaviour.failStatus = 500;
    const r = await router.transcribe({ pcm: second, workerId: "worker-a" });
    expect(r.fallbackUsed).toBe(true);
    expect(primaryA.requests).toHaveLength(1);
  });

  it("both failing → 502 transcription_failed naming the timeout in ms, at most 2 attempts", async () => {
    await reset();
    primaryA.behaviour.delayMs = 3000;
    fallback.behaviour.delayMs = 3000;
    const t0 = performance.now();
    const err = await router.transcribe({ pcm: second, workerId: "worker-a" }).catch((e) => e);
    expect(performance.now() - t0).toBeLessThan(1600 + SLACK_MS);
    expect(err).toMatchObject({ status: 502, code: "transcription_failed", type: "invalid_request_error" });
    expect(err.message).toMatch(/800 ms/);
    expect(primaryA.requests).toHaveLength(1);
    expect(fallback.requests).toHaveLength(1);
  });

  it("no fallback configured: a failing primary gives 502 after one attempt", async () => {
    await reset();
    primaryA.behaviour.failStatus = 503;
    const err = await noFallbackRouter.transcribe({ pcm: second, workerId: "worker-a" }).catch((e) => e);
    expect(err).toMatchObject({ status: 502, code: "transcription_failed" });
    expect(err.message).toMatch(/\d+ ms/);
    expect(primaryA.requests).toHaveLength(1);
  });

  it("more worker processes simply join: the workerAny queue group spreads requests over them", async () => {
    await reset();
    const seen = new Map<string, number>();
    for (let i = 0; i < 16; i++) {
      const msg = await nats.nc.request(
        nats.topology.subjects.workerAny,
        encodeWorkerRequest({ requestId: `r${i}`, samples: second.length }, second),
        { timeout: 5000 },
      );
      const reply = workerReply.parse(msg.json());
      expect(reply.ok).toBe(true);
      seen.set(reply.workerId, (seen.get(reply.workerId) ?? 0) + 1);
    }
    expect([...seen.keys()].sort()).toEqual(["worker-a", "worker-b"]);
  });

  it("prefers workers that serve the language hint", async () => {
    await reset();
    const engine = await createOpenAIEngine({ url: primaryA.url, languages: ["en"], realTimeFactor: 0.05, probeMs: 100 });
    const enOnly = await startWorkerService({ nats, engine, id: "worker-en-only", heartbeatMs: HEARTBEAT, logger });
    workers.push(enOnly);
    await waitFor(() => router.workers().some((w) => w.id === "worker-en-only" && w.warm));
    expect(router.workers().find((w) => w.id === "worker-en-only")!.languages).toEqual(["en"]);
    for (let i = 0; i < 8; i++) {
      const r = await router.transcribe({ pcm: second, language: "de" });
      expect(r.workerId).not.toBe("worker-en-only");
    }
    await enOnly.stop();
  });

  it("a stopped worker leaves the registry and is no longer routed to", async () => {
    await reset();
    const extra = await startOpenAIWorker(primaryA, "worker-gone");
    await waitFor(() => router.workers().some((w) => w.id === "worker-gone"));
    await extra.stop();
    await waitFor(() => !router.workers().some((w) => w.id === "worker-gone"));
    const r = await router.transcribe({ pcm: second, workerId: "worker-gone" });
    expect(r.fallbackUsed).toBe(true);
  });

  it("the per-attempt timeout grows with the worker's real-time factor and the clip length", () => {
    expect(attemptTimeoutMs(800, 1, 0.05)).toBe(800);
    expect(attemptTimeoutMs(800, 10, 0.5)).toBe(7750);
    expect(attemptTimeoutMs(800, 900, 0.5)).toBe(675_250);
  });

  it("embedded PocketSphinx worker over NATS, with a clip larger than the max payload (pulled in pieces)", async () => {
    await reset();
    const engine = await createPocketsphinxEngine({ processes: 1 });
    const ps = await startWorkerService({ nats, engine, id: "ps-test", heartbeatMs: HEARTBEAT, logger });
    workers.push(ps);
    await waitFor(() => router.workers().some((w) => w.id === "ps-test" && w.warm));
    const wav = await decodeAudio(await readFile("/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0920.wav"));
    // Repeat the clip to ~40 s: 1.28 MB of PCM, over NATS's default 1 MiB max payload.
    const long = new Int16Array(wav.pcm.length * 6);
    for (let i = 0; i < 6; i++) long.set(wav.pcm, i * wav.pcm.length);
    expect(long.byteLength).toBeGreaterThan(nats.nc.info!.max_payload);
    const r = await router.transcribe({ pcm: long, workerId: "ps-test" });
    expect(r.fallbackUsed).toBe(false);
    expect(r.workerId).toBe("ps-test");
    expect(r.result.duration).toBeCloseTo(long.length / 16_000, 1);
    expect(r.result.text.split(" ").filter((w) => w === "amiable").length).toBeGreaterThanOrEqual(4);
    expect(r.result.words.at(-1)!.end).toBeGreaterThan(30);
  });

  it("a worker in the router's own process gets the clip by a call: nothing crosses NATS, and its timeout still sends the clip to the fallback", async () => {
    await reset();
    // its own worker and server: the others' observed real-time factors carry earlier tests' delays
    const primaryC = await startProviderServer("primary-c");
    await startOpenAIWorker(primaryC, "worker-c");
    const local = await createWorkerRouter({ nats, budgetMs: 800, staleMs: 5000, fallback: { url: fallback.url, apiKey: "sk-fallback-secret" }, logger });
    const seen: string[] = [];
    const spy = nats.nc.subscribe(nats.topology.subjects.workerRequest("worker-c"), { callback: (_e, m) => void seen.push(m.subject) });
    try {
      await nats.nc.flush();
      await waitFor(() => local.workers().some((w) => w.id === "worker-c" && w.warm) && router.workers().some((w) => w.id === "worker-c" && w.warm));
      const r = await local.transcribe({ pcm: second, workerId: "worker-c", language: "en", prompt: "hello" });
      expect(r).toMatchObject({ workerId: "worker-c", fallbackUsed: false });
      expect(r.result.text).toBe("primary-c heard 1.00 seconds");
      expect(primaryC.requests[0]).toMatchObject({ samples: 16_000, language: "en", prompt: "hello" });
      expect(seen).toHaveLength(0);
      // the same request over NATS is seen by the spy
      await router.transcribe({ pcm: second, workerId: "worker-c" });
      await nats.nc.flush();
      expect(seen).toHaveLength(1);

      primaryC.behaviour.delayMs = 3000;
      const t0 = performance.now();
      const slow = await local.transcribe({ pcm: second, workerId: "worker-c" });
      expect(slow).toMatchObject({ workerId: "fallback", fallbackUsed: true });
      expect(performance.now() - t0).toBeGreaterThanOrEqual(790);
      expect(performance.now() - t0).toBeLessThan(1600 + SLACK_MS);
    } finally {
      spy.unsubscribe();
      await local.stop();
      primaryC.behaviour.delayMs = 0;
      await workers.pop()!.stop();
      await primaryC.close();
    }
  });
});
