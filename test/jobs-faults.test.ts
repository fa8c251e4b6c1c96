import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { spawn, type ChildProcess } from "node:child_process";
import { createObjectStore } from "../shared/objects/index";
import { startStack, type Stack } from "./support/stack";
import { stackChildEnv } from "./support/service-process";
import { serviceDefs } from "../services/stt/services";
import { startJobTranscriber } from "../services/jobs/start";
import { loadEvents } from "../shared/event-store";
import { AppError } from "../shared/errors";
import type { WorkerRouter } from "../shared/workers/types";
import type { JobView } from "../schemas/jobs";
import { jobEventEnvelope } from "../domain/jobs/events";
import { randomHex, startHttp, waitFor, type LocalHttp } from "./support/jobs-helpers";
import { fixturePath } from "./support/fixtures";

// Fault tests on the real stack. The job transcriber is not started with the stack:
// each test starts (and kills) its own replicas, whose worker router is the stack's
// real router wrapped to count finished transcriptions (and, in one test, to refuse
// one call) — the workers, NATS, Postgres and object store are all real.
const AUDIO = readFileSync(fixturePath("silero_test.wav"));

let audioServer: LocalHttp;
let stack: Stack;
let key: string;

beforeAll(async () => {
  audioServer = await startHttp((_req, res) => {
    res.writeHead(200, { "content-type": "audio/wav" });
    res.end(AUDIO);
  });
  stack = await startStack({
    STT_SERVICES: serviceDefs.map((s) => s.name).filter((n) => n !== "jobs-transcriber").join(","),
    JOB_STEP_ACK_WAIT_MS: "5000",
  });
  key = (await stack.issueKey("pro", `owner-${randomHex()}`)).key;
});

afterAll(async () => {
  await stack?.stop();
  await audioServer?.stop();
});

interface Counting extends WorkerRouter {
  completed: number;
  /** Clip lengths (samples) of the finished transcriptions: identifies the slices. */
  clips: number[];
  failNext: number;
  /** Make the next calls fail with a retryable error instead. */
  retryable: boolean;
}

function counting(inner: WorkerRouter): Counting {
  const r: Counting = {
    completed: 0,
    clips: [],
    failNext: 0,
    retryable: false,
    available: () => inner.available(),
    retryAfterSeconds: () => inner.retryAfterSeconds(),
    async transcribe(request) {
      if (r.failNext > 0) {
        r.failNext--;
        if (r.retryable) throw new AppError("upstream", "injected_timeout", "a retryable failure injected by the test");
        throw new AppError("validation", "injected_failure", "a permanent failure injected by the test");
      }
      const result = await inner.transcribe(request);
      r.completed++;
      r.clips.push(request.pcm.length);
      return result;
    },
  };
  return r;
}

const startReplica = (router: WorkerRouter) => startJobTranscriber({ ...stack.runtime.ctx, router });

/** A jobs-transcriber in its own OS process on the stack's NATS prefix, schema and store. */
async function spawnReplica(): Promise<ChildProcess> {
  const c = stack.config;
  const child = spawn(process.execPath, ["--import", "tsx", "test/support/jobs-child-transcriber.ts"], {
    env: {
      ...process.env,
      ...stackChildEnv(stack),
      JOB_STEP_ACK_WAIT_MS: String(c.jobs.stepAckWaitMs),
      WORKER_EMBEDDED: "none",
      LOG_LEVEL: "error",
      PORT: "0",
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (d: Buffer) => d.toString().includes("ready") && resolve());
    child.on("exit", (code) => reject(new Error(`replica exited early (${code})`)));
  });
  return child;
}

async function submit(requestId: string): Promise<string> {
  const res = await stack.fetch("/v1/audio/transcriptions/jobs", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ audio_url: `${audioServer.url}/speech.wav`, request_id: requestId, segment_seconds: 10, concurrency: 3 }),
  });
  expect(res.status).toBe(202);
  return ((await res.json()) as { workflow_id: string }).workflow_id;
}

async function poll(id: string): Promise<JobView> {
  const res = await stack.fetch(`/v1/audio/transcriptions/jobs/${id}`, { headers: { authorization: `Bearer ${key}` } });
  return (await res.json()) as JobView;
}

const chunkSteps = (v: JobView) => v.steps.filter((s) => s.name.startsWith("transcribe_chunk_"));

async function loadJobEvents(id: string) {
  const { nats } = stack;
  const { events } = await loadEvents(nats.js, nats.jsm, nats.topology.streams.jobs.name, jobEventEnvelope, nats.topology.subjects.jobEvent(id));
  return events.map((r) => r.event);
}

async function chunkEvents(id: string) {
  return (await loadJobEvents(id)).filter((e) => e.type === "ChunkTranscribed");
}

describe("batch job faults", () => {
  it("a transcriber killed mid-job: a new replica finishes it and no finished chunk is transcribed twice", { timeout: 400_000 }, async () => {
    const id = await submit(`kill-${randomHex()}`);
    const first = counting(stack.runtime.ctx.router!);
    const replicaA = await startReplica(first);
    // Kill it once some chunks are done and others are in flight.
    await waitFor(
      async () => {
        const v = await poll(id);
        const steps = chunkSteps(v);
        return steps.filter((s) => s.status === "complete").length >= 2 && steps.some((s) => s.status === "running") ? v : undefined;
      },
      { timeoutMs: 150_000, everyMs: 50, what: "two finished chunks" },
    );
    await replicaA.stop();
    const doneByA = first.completed;
    const afterKill = await poll(id);
    expect(afterKill.status).toBe("running");
    expect(doneByA).toBeGreaterThanOrEqual(2);
    expect(doneByA).toBeLessThan(6);

    const second = counting(stack.runtime.ctx.router!);
    const replicaB = await startReplica(second);
    try {
      const view = await waitFor(async () => {
        const v = await poll(id);
        return v.status === "complete" || v.status === "errored" ? v : undefined;
      }, { timeoutMs: 250_000, everyMs: 200, what: "job completion" });
      expect(view.error).toBeNull();
      expect(view.status).toBe("complete");
      expect(view.output!.result.metadata.chunk_count).toBe(6);
    } finally {
      await replicaB.stop();
    }
    // Every chunk was transcribed exactly once across both replicas.
    expect(first.completed + second.completed).toBe(6);
    expect(second.completed).toBe(6 - doneByA);
    const recorded = await chunkEvents(id);
    expect(recorded.map((e) => (e.type === "ChunkTranscribed" ? e.data.index : -1)).sort()).toEqual([0, 1, 2, 3, 4, 5]);
    console.log(`[jobs-faults] killed after ${doneByA} chunks; the new replica transcribed ${second.completed}`);
  });

  it("a transcriber process killed with SIGKILL: another one finishes the job, keeping every checkpoint", { timeout: 400_000 }, async () => {
    const requestId = `sigkill-${randomHex()}`;
    const id = await submit(requestId);
    const a = await spawnReplica();
    let b: ChildProcess | undefined;
    try {
      const before = await waitFor(
        async () => {
          const v = await poll(id);
          const steps = chunkSteps(v);
          return steps.filter((s) => s.status === "complete").length >= 2 && steps.some((s) => s.status === "running") ? v : undefined;
        },
        { timeoutMs: 150_000, everyMs: 50, what: "two finished chunks" },
      );
      a.kill("SIGKILL");
      const store = await createObjectStore(stack.config.objects);
      const done = chunkSteps(before).filter((s) => s.status === "complete").map((s) => Number(s.name.split("_").at(-1)));
      const stamps = new Map<number, string>();
      for (const i of done) stamps.set(i, JSON.parse((await store.get(`transcription/${requestId}/${id}/chunk_${i}.json`))!.toString()).transcribed_at);
      expect((await poll(id)).status).toBe("running");

      b = await spawnReplica();
      const view = await waitFor(async () => {
        const v = await poll(id);
        return v.status === "complete" || v.status === "errored" ? v : undefined;
      }, { timeoutMs: 250_000, everyMs: 200, what: "job completion after SIGKILL" });
      expect(view.error).toBeNull();
      expect(view.output!.result.metadata.chunk_count).toBe(6);
      // Chunks finished before the kill were not transcribed again: same checkpoints.
      for (const [i, stamp] of stamps) {
        expect(JSON.parse((await store.get(`transcription/${requestId}/${id}/chunk_${i}.json`))!.toString()).transcribed_at).toBe(stamp);
      }
      const recorded = (await chunkEvents(id)).map((e) => (e.type === "ChunkTranscribed" ? e.data.index : -1)).sort();
      expect(recorded).toEqual([0, 1, 2, 3, 4, 5]);
      await store.close();
      console.log(`[jobs-faults] SIGKILL after ${done.length} chunks; completed by a second process`);
    } finally {
      a.kill("SIGKILL");
      b?.kill("SIGTERM");
      b?.kill("SIGKILL");
    }
  });

  it("a retryable chunk failure is retried with backoff and recorded in the steps", { timeout: 400_000 }, async () => {
    const router = counting(stack.runtime.ctx.router!);
    router.retryable = true;
    router.failNext = 2;
    const replica = await startReplica(router);
    try {
      const id = await submit(`retry-${randomHex()}`);
      const view = await waitFor(async () => {
        const v = await poll(id);
        return v.status === "complete" || v.status === "errored" ? v : undefined;
      }, { timeoutMs: 250_000, everyMs: 200, what: "the job" });
      expect(view.error).toBeNull();
      expect(view.status).toBe("complete");
      expect(router.completed).toBe(6);
      const retried = (await loadJobEvents(id)).filter((e) => e.type === "StepAttemptFailed");
      expect(retried).toHaveLength(2);
      expect(retried.every((e) => e.type === "StepAttemptFailed" && !e.data.final && e.data.error.code === "injected_timeout")).toBe(true);
    } finally {
      await replica.stop();
    }
  });

  it("a resubmitted errored job resumes from its checkpoints and keeps its workflow id", { timeout: 400_000 }, async () => {
    const requestId = `resume-${randomHex()}`;
    const router = counting(stack.runtime.ctx.router!);
    const replica = await startReplica(router);
    try {
      // Let two chunks finish, then make the next call fail permanently.
      const id = await submit(requestId);
      await waitFor(async () => router.completed >= 2 || undefined, { timeoutMs: 150_000, everyMs: 20, what: "two chunks" });
      router.failNext = 1;
      const failed = await waitFor(async () => {
        const v = await poll(id);
        return v.status === "errored" ? v : undefined;
      }, { timeoutMs: 150_000, everyMs: 100, what: "the injected failure" });
      expect(failed.error).toMatchObject({ code: "injected_failure" });
      expect(failed.output).toBeNull();
      // Let chunks that were in flight at the failure settle, then count what is done.
      await new Promise((r) => setTimeout(r, 500));
      await waitFor(async () => chunkSteps(await poll(id)).every((s) => s.status !== "running") || undefined, { timeoutMs: 60_000, what: "in-flight chunks" });
      const doneBefore = router.completed;
      expect(doneBefore).toBeLessThan(6);

      const again = await submit(requestId);
      expect(again).toBe(id);
      const view = await waitFor(async () => {
        const v = await poll(id);
        return v.status === "complete" ? v : undefined;
      }, { timeoutMs: 250_000, everyMs: 200, what: "the resumed job" });
      expect(view.error).toBeNull();
      expect(view.output!.result.metadata.chunk_count).toBe(6);
      // Only the unfinished chunks were transcribed after the resume.
      expect(router.completed).toBe(6);
      const failedStep = view.steps.find((s) => s.attempt === 2);
      expect(failedStep?.name).toMatch(/^transcribe_chunk_\d$/);
      expect(failedStep?.status).toBe("complete");
    } finally {
      await replica.stop();
    }
  });
});
