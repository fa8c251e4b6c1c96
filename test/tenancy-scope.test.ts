import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { startStack, type Stack } from "./support/stack";
import { fixturePath } from "./support/fixtures";
import { randomHex, startHttp, waitFor, type LocalHttp } from "./support/jobs-helpers";
import { createObjectStore } from "../shared/objects/index";
import { encodeWav, pcm16MonoFromWav } from "../shared/audio/wav";
import { jobDefaults, type JobResult, type JobView } from "../schemas/jobs";
import type { JobSpec } from "../domain/jobs/events";
import { legacyWorkflowIdFor } from "../schemas/job-ids";
import { createJobStore } from "../domain/jobs/store";

/**
 * request_ids are scoped per tenant (issue 9), on the real stack: two tenants submitting
 * one request_id get two jobs that run side by side, each visible to its own tenant
 * only, with artifacts that never meet; and a job submitted before the scoping (under
 * the legacy request_id-only id) is still resumed by its owner's resubmission and
 * still read from its flat artifact folder.
 */
const JFK = readFileSync(fixturePath("jfk.wav"));
const FIRST_4S = encodeWav(pcm16MonoFromWav(JFK)!.subarray(0, 4 * 16000));

let stack: Stack;
let audio: LocalHttp;
let flakyUp = false;

beforeAll(async () => {
  stack = await startStack();
  audio = await startHttp((req, res) => {
    const body = req.url === "/jfk.wav" ? JFK : req.url === "/first4s.wav" ? FIRST_4S : req.url === "/flaky.wav" && flakyUp ? JFK : undefined;
    res.writeHead(body ? 200 : 404, { "content-type": "audio/wav" });
    res.end(body);
  });
});
afterAll(async () => {
  await audio?.stop();
  await stack?.stop();
});

interface Tenant {
  owner: string;
  keyId: string;
  submit(body: Record<string, unknown>): Promise<{ status: number; body: any }>;
  poll(id: string): Promise<{ status: number; body: JobView }>;
  waitDone(id: string): Promise<JobView>;
}

async function tenant(label: string): Promise<Tenant> {
  const owner = `${label}-${randomHex()}`;
  const { key, id: keyId } = await stack.issueKey("pro", owner);
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
  const poll = async (id: string) => {
    const res = await stack.fetch(`/v1/audio/transcriptions/jobs/${id}`, { headers });
    return { status: res.status, body: (await res.json()) as JobView };
  };
  return {
    owner,
    keyId,
    async submit(body) {
      const res = await stack.fetch("/v1/audio/transcriptions/jobs", { method: "POST", headers, body: JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    },
    poll,
    waitDone: (id) =>
      waitFor(
        async () => {
          const { status, body } = await poll(id);
          return status === 200 && (body.status === "complete" || body.status === "errored") ? body : undefined;
        },
        { timeoutMs: 150_000, everyMs: 200, what: `job ${id}` },
      ),
  };
}

describe("request_id scoped per tenant", () => {
  it("two tenants using one request_id get separate jobs, each polls only its own, artifacts never meet", { timeout: 240_000 }, async () => {
    const [a, b] = await Promise.all([tenant("tenant-a"), tenant("tenant-b")]);
    const requestId = `shared-${randomHex()}`;

    const subA = await a.submit({ audio_url: `${audio.url}/jfk.wav`, request_id: requestId, segment_seconds: 5 });
    const subB = await b.submit({ audio_url: `${audio.url}/first4s.wav`, request_id: requestId, segment_seconds: 5 });
    expect(subA.status).toBe(202);
    expect(subB.status).toBe(202); // no 409: B cannot tell that A used the value
    expect(subA.body).toMatchObject({ request_id: requestId, status: "queued" });
    expect(subB.body).toMatchObject({ request_id: requestId, status: "queued" });
    const idA: string = subA.body.workflow_id;
    const idB: string = subB.body.workflow_id;
    expect(idA).not.toBe(idB);
    expect(idA).not.toBe(legacyWorkflowIdFor(requestId));

    // Same tenant, same request_id: the same job (idempotent).
    const againA = await a.submit({ audio_url: `${audio.url}/jfk.wav`, request_id: requestId, segment_seconds: 5 });
    expect(againA).toMatchObject({ status: 202, body: { workflow_id: idA } });

    // Each tenant sees its own job only; the other's is indistinguishable from none.
    expect((await a.poll(idB)).status).toBe(404);
    expect((await b.poll(idA)).status).toBe(404);

    const [viewA, viewB] = await Promise.all([a.waitDone(idA), b.waitDone(idB)]);
    expect(viewA).toMatchObject({ status: "complete", workflow_id: idA, request_id: requestId, error: null });
    expect(viewB).toMatchObject({ status: "complete", workflow_id: idB, request_id: requestId, error: null });
    // Each result is its own audio's: 11 s of JFK vs its first 4 s.
    expect(viewA.output!.result.metadata).toMatchObject({ workflow_id: idA, request_id: requestId });
    expect(viewB.output!.result.metadata).toMatchObject({ workflow_id: idB, request_id: requestId });
    expect(viewA.output!.result.metadata.audio_duration_seconds).toBeGreaterThan(10);
    expect(viewB.output!.result.metadata.audio_duration_seconds).toBeLessThan(5);
    expect((await a.poll(idB)).status).toBe(404);
    expect((await b.poll(idA)).status).toBe(404);

    // The artifacts: one folder per job under the shared request_id prefix.
    const store = await createObjectStore(stack.config.objects);
    try {
      const keys = await store.list(`transcription/${requestId}/`);
      for (const id of [idA, idB]) {
        expect(keys).toContain(`transcription/${requestId}/${id}/audio.pcm`);
        expect(keys).toContain(`transcription/${requestId}/${id}/chunk_0.json`);
        expect(keys).toContain(`transcription/${requestId}/${id}/result.json`);
      }
      expect(keys.every((k) => k.startsWith(`transcription/${requestId}/${idA}/`) || k.startsWith(`transcription/${requestId}/${idB}/`))).toBe(true);
      const stored = (id: string) => store.get(`transcription/${requestId}/${id}/result.json`).then((b) => JSON.parse(b!.toString()) as JobResult);
      expect(await stored(idA)).toEqual(viewA.output!.result);
      expect(await stored(idB)).toEqual(viewB.output!.result);
    } finally {
      await store.close();
    }
  });

  it("a job from before the scoping (legacy id): its owner's resubmission resumes it, another tenant's does not touch it", { timeout: 240_000 }, async () => {
    const [c, d] = await Promise.all([tenant("tenant-c"), tenant("tenant-d")]);
    const requestId = `legacy-${randomHex()}`;
    const legacyId = legacyWorkflowIdFor(requestId);
    // What the gateway appended before request_ids were scoped: the job under the id of
    // the request_id alone. Its audio is not there yet, so it errors.
    const spec: JobSpec = {
      workflowId: legacyId,
      requestId,
      ownerId: c.owner,
      keyId: c.keyId,
      audioUrl: `${audio.url}/flaky.wav`,
      model: jobDefaults.model,
      segmentSeconds: 5,
      concurrency: 2,
      review: false,
      maxAudioSeconds: 3600,
    };
    await createJobStore(stack.nats).execute(legacyId, { type: "SubmitJob", spec, now: new Date().toISOString() });
    const failed = await c.waitDone(legacyId);
    expect(failed.status).toBe("errored");
    expect(failed.error).toMatchObject({ code: "audio_not_found" });

    // Another tenant with the same request_id gets its own job; the legacy one is not theirs.
    const other = await d.submit({ audio_url: `${audio.url}/first4s.wav`, request_id: requestId });
    expect(other.status).toBe(202);
    expect(other.body.workflow_id).not.toBe(legacyId);
    expect((await d.poll(legacyId)).status).toBe(404);

    // The owner resubmits: the legacy job resumes under its old id and completes, and
    // its output is read from the flat folder it was written to.
    flakyUp = true;
    const resumed = await c.submit({ audio_url: `${audio.url}/flaky.wav`, request_id: requestId });
    expect(resumed).toMatchObject({ status: 202, body: { workflow_id: legacyId } });
    const done = await waitFor(
      async () => {
        const { body } = await c.poll(legacyId);
        return body.status === "complete" ? body : undefined;
      },
      { timeoutMs: 150_000, everyMs: 200, what: "the resumed legacy job" },
    );
    expect(done.output!.result.metadata).toMatchObject({ workflow_id: legacyId, request_id: requestId });
    const otherDone = await d.waitDone(other.body.workflow_id);
    expect(otherDone.status).toBe("complete");
    const store = await createObjectStore(stack.config.objects);
    try {
      const keys = await store.list(`transcription/${requestId}/`);
      expect(keys).toContain(`transcription/${requestId}/result.json`);
      expect(keys).toContain(`transcription/${requestId}/${other.body.workflow_id}/result.json`);
    } finally {
      await store.close();
    }
  });
});
