import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createOpenAIEngine } from "../services/transcriber/openai-engine";
import { startWorkerService, type RunningWorker } from "../services/transcriber/worker-service";
import type { WorkerAnnouncement } from "../schemas/segment";
import { createLogger } from "../shared/logger";
import { connectNats, destroyTopology, type Nats } from "../shared/nats";
import { createWorkerRouter, isTransientRoutingFailure, type RunningRouter } from "../shared/workers/router";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * docs/workers.md, "Routing rules" (no responders): a registered worker nobody answers for (it died,
 * or stopped before its entry went) is not an attempt. The router marks it dead until
 * a newer heartbeat and moves to the next warm worker; with none left the failure is
 * transient (the batch plane retries it later).
 */
const logger = createLogger("error");
const second = new Int16Array(16_000).map((_, i) => Math.round(3000 * Math.sin(i / 5)));

describe("worker router: no responders", () => {
  let nats: Nats;
  let provider: ProviderServer;
  let live: RunningWorker;
  let router: RunningRouter;

  /** A warm announcement for a worker id nothing subscribes to: a worker that died. */
  const announceGhost = async (id: string, at = Date.now()) => {
    const ghost: WorkerAnnouncement = { id, kind: "openai", models: ["stt-1"], languages: ["*"], warm: true, inFlight: 0, concurrency: 64, realTimeFactor: 0.05, host: "gone", at };
    await (await nats.kv("workers")).put(id, JSON.stringify(ghost));
  };
  const until = async (cond: () => boolean, ms = 5000) => {
    const deadline = Date.now() + ms;
    while (!cond()) {
      if (Date.now() > deadline) throw new Error("condition not reached");
      await new Promise((r) => setTimeout(r, 25));
    }
  };

  beforeAll(async () => {
    nats = await connectNats({ url: process.env.NATS_URL ?? "nats://127.0.0.1:4222", prefix: `t${randomBytes(4).toString("hex")}` });
    provider = await startProviderServer("live");
    router = await createWorkerRouter({ nats, budgetMs: 800, staleMs: 60_000, logger });
  });

  afterAll(async () => {
    await router?.stop();
    await live?.stop();
    await provider?.close();
    if (nats) {
      await destroyTopology(nats);
      await nats.close();
    }
  });

  it("only a dead worker registered: 502 transcription_failed, transient, no attempt made", async () => {
    await announceGhost("ghost-0");
    await until(() => router.workers().some((w) => w.id === "ghost-0"));
    const err = await router.transcribe({ pcm: second }).catch((e) => e);
    expect(err).toMatchObject({ status: 502, code: "transcription_failed" });
    expect(err.message).toMatch(/ghost-0 has no responders/);
    expect(isTransientRoutingFailure(err)).toBe(true);
    // marked dead until a newer heartbeat
    expect(router.workers().map((w) => w.id)).not.toContain("ghost-0");
    await announceGhost("ghost-0");
    await until(() => router.workers().some((w) => w.id === "ghost-0"));
  });

  it("dead workers are skipped for the next warm one; every request lands on the live worker", async () => {
    const engine = await createOpenAIEngine({ url: provider.url, apiKey: "sk-upstream-secret", realTimeFactor: 0.05, probeMs: 100 });
    live = await startWorkerService({ nats, engine, id: "live-1", heartbeatMs: 200, logger });
    for (const id of ["ghost-1", "ghost-2", "ghost-3"]) await announceGhost(id);
    await until(() => router.workers().filter((w) => w.warm).length >= 5);
    // Equally loaded workers are picked at random: send until every ghost has been
    // tried (each at most once, then left out); every request lands on the live worker.
    for (let i = 0; i < 60 && router.workers().length > 1; i++) {
      const r = await router.transcribe({ pcm: second });
      expect(r).toMatchObject({ workerId: "live-1", fallbackUsed: false });
    }
    expect(router.workers().map((w) => w.id)).toEqual(["live-1"]);
  });

  it("a stopped worker deletes its registry entry at once", async () => {
    await live.stop();
    await until(() => !router.workers().some((w) => w.id === "live-1"), 2000);
  });
});
