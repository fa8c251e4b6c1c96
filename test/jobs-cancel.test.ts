import { readFileSync } from "node:fs";
import { DeliverPolicy } from "@nats-io/jetstream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { artifactKeys } from "../schemas/jobs";
import { jobEventEnvelope } from "../domain/jobs/events";
import { createLogger } from "../shared/logger";
import { sweepExpiredJobs } from "../services/jobs/retention";
import { fixturePath } from "./support/fixtures";
import { randomHex, startHttp, waitFor, type LocalHttp } from "./support/jobs-helpers";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Job cancel (DELETE …/jobs/{id}) and the retention sweep, on the real stack with a
 * slow real provider so a job is still running when it is cancelled.
 */
const AUDIO = readFileSync(fixturePath("silero_test.wav"));
const JOBS = "/v1/audio/transcriptions/jobs";

let stack: Stack;
let provider: ProviderServer;
let audioServer: LocalHttp;
let key: string;
let otherKey: string;

beforeAll(async () => {
  provider = await startProviderServer("slow");
  provider.behaviour.delayMs = 1500;
  audioServer = await startHttp((_req, res) => res.writeHead(200, { "content-type": "audio/wav" }).end(AUDIO));
  stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", JOB_RETENTION_DAYS: "0" });
  key = (await stack.issueKey("pro", `owner-${randomHex()}`)).key;
  otherKey = (await stack.issueKey("pro", `other-${randomHex()}`)).key;
});

afterAll(async () => {
  await stack?.stop();
  await audioServer?.stop();
  await provider?.close();
});

const auth = (k: string) => ({ authorization: `Bearer ${k}`, "content-type": "application/json" });
const submit = async (body: Record<string, unknown>) => {
  const res = await stack.fetch(JOBS, { method: "POST", headers: auth(key), body: JSON.stringify({ audio_url: `${audioServer.url}/a.wav`, ...body }) });
  expect(res.status).toBe(202);
  return ((await res.json()) as any).workflow_id as string;
};
const poll = async (id: string, k = key) => (await stack.fetch(`${JOBS}/${id}`, { headers: auth(k) })).json() as Promise<any>;

async function jobEvents(workflowId: string): Promise<string[]> {
  const consumer = await stack.nats.js.consumers.get(stack.nats.topology.streams.jobs.name, { filter_subjects: stack.nats.topology.subjects.jobEvent(workflowId), deliver_policy: DeliverPolicy.All });
  const types: string[] = [];
  const pending = (await consumer.info(true)).num_pending;
  if (pending > 0) {
    const batch = await consumer.fetch({ max_messages: pending, expires: 2000 });
    for await (const m of batch) {
      types.push(jobEventEnvelope.parse(m.json()).type);
      if (m.info.pending === 0) break;
    }
  }
  await consumer.delete().catch(() => undefined);
  return types;
}

describe("job cancel", () => {
  it("cancels a running job: terminated, nothing recorded afterwards, only for its owner", async () => {
    const id = await submit({ segment_seconds: 5, concurrency: 1 });
    // running, with at least one chunk done and more to go
    await waitFor(async () => (await poll(id)).steps.some((s: any) => s.name.startsWith("transcribe_chunk_") && s.status === "complete"), { timeoutMs: 60_000, what: "a first chunk" });
    expect((await stack.fetch(`${JOBS}/${id}`, { method: "DELETE", headers: auth(otherKey) })).status).toBe(404);
    const res = await stack.fetch(`${JOBS}/${id}`, { method: "DELETE", headers: auth(key) });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).status).toBe("terminated");
    const atCancel = await jobEvents(id);
    expect(atCancel.at(-1)).toBe("JobTerminated");
    // the chunk in flight finishes at the provider (1.5 s) and is not recorded; no more start
    await new Promise((r) => setTimeout(r, 4000));
    const later = await jobEvents(id);
    expect(later).toEqual(atCancel);
    const view = await waitFor(async () => {
      const v = await poll(id);
      return v.status === "terminated" ? v : undefined;
    }, { what: "the read model to show terminated" });
    expect(view.output).toBeNull();
    // idempotent: cancelling again answers the job as it is
    const again = await stack.fetch(`${JOBS}/${id}`, { method: "DELETE", headers: auth(key) });
    expect(again.status).toBe(200);
    expect((await jobEvents(id)).filter((t) => t === "JobTerminated")).toHaveLength(1);
    // resubmitting its request_id is the same, terminated job
    const resubmit = await stack.fetch(JOBS, { method: "POST", headers: auth(key), body: JSON.stringify({ audio_url: `${audioServer.url}/a.wav`, request_id: view.request_id }) });
    expect(((await resubmit.json()) as any).workflow_id).toBe(id);
    expect((await poll(id)).status).toBe("terminated");
  });

  it("a complete job is 409 job_not_cancellable; the retention sweep removes old jobs' artifacts and rows", async () => {
    provider.behaviour.delayMs = 0;
    const id = await submit({ segment_seconds: 30 });
    const done = await waitFor(async () => {
      const v = await poll(id);
      return v.status === "complete" ? v : undefined;
    }, { timeoutMs: 60_000, what: "the job to complete" });
    const res = await stack.fetch(`${JOBS}/${id}`, { method: "DELETE", headers: auth(key) });
    expect(res.status).toBe(409);
    expect(((await res.json()) as any).error.code).toBe("job_not_cancellable");

    const job = { workflowId: id, requestId: done.request_id };
    const objects = stack.runtime.ctx.objects;
    expect(await objects.list(artifactKeys.prefix(job))).toContain(artifactKeys.result(job));
    const deps = { db: stack.db, objects, logger: createLogger("error") };
    // a day later, nothing is old enough
    expect(await sweepExpiredJobs(deps, new Date(Date.now() + 86_400_000), 30)).toBe(0);
    expect(await objects.list(artifactKeys.prefix(job))).not.toHaveLength(0);
    // 31 days later, it is
    expect(await sweepExpiredJobs(deps, new Date(Date.now() + 31 * 86_400_000), 30)).toBeGreaterThanOrEqual(1);
    expect(await objects.list(artifactKeys.prefix(job))).toHaveLength(0);
    expect(await stack.db.selectFrom("jobs").select("workflow_id").where("workflow_id", "=", id).executeTakeFirst()).toBeUndefined();
  });
});
