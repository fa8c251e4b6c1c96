import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHmac, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { startStack, type Stack } from "./support/stack";
import { createObjectStore } from "../shared/objects/index";
import type { JobView, WebhookPayload } from "../schemas/jobs";
import { randomHex, readBody, startHttp, startLocalS3, waitFor, type LocalHttp, type LocalS3 } from "./support/jobs-helpers";
import { fixturePath } from "./support/fixtures";
import { encodeWav } from "../shared/audio/wav";
import { loadEvents } from "../shared/event-store";
import { evolve, initialJobState, type JobState } from "../domain/jobs/decider";
import { jobEventEnvelope } from "../domain/jobs/events";
import { jobEventId } from "../domain/jobs/store";

// End to end on the real stack: NATS, Postgres, the embedded PocketSphinx workers, the
// object store (filesystem and s3rver), a real HTTP server serving the audio and a
// real HTTP server receiving the webhook.
const AUDIO = readFileSync(fixturePath("silero_test.wav"));
const SECRET = `whsec-${randomHex(8)}`;

let audioServer: LocalHttp;
let hookServer: LocalHttp;
const hooks: { headers: Record<string, string | string[] | undefined>; body: string }[] = [];

beforeAll(async () => {
  audioServer = await startHttp((req, res) => {
    if (req.url === "/short.wav") {
      const jfk = readFileSync(fixturePath("jfk.wav"));
      res.writeHead(200, { "content-type": "audio/wav" });
      res.end(jfk);
    } else if (req.url === "/speech.wav") {
      res.writeHead(200, { "content-type": "audio/wav", "content-length": AUDIO.length });
      res.end(AUDIO);
    } else if (req.url === "/page.html") {
      res.writeHead(200, { "content-type": "text/html" });
      res.end("<html>not audio</html>");
    } else if (req.url === "/noise.bin") {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      res.end(Buffer.from("this is not an audio file at all".repeat(100)));
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  hookServer = await startHttp(async (req, res) => {
    hooks.push({ headers: req.headers, body: (await readBody(req)).toString("utf8") });
    res.writeHead(204);
    res.end();
  });
});

afterAll(async () => {
  await audioServer?.stop();
  await hookServer?.stop();
});

interface Client {
  stack: Stack;
  key: string;
  owner: string;
  post(body: unknown, raw?: string, path?: string): Promise<Response>;
  poll(id: string, path?: string): Promise<{ status: number; body: JobView }>;
}

async function clientFor(stack: Stack, owner = `owner-${randomHex()}`, plan = "free"): Promise<Client> {
  const { key } = await stack.issueKey(plan, owner);
  return {
    stack,
    key,
    owner,
    post: (body, raw, path = "/v1/audio/transcriptions/jobs") =>
      stack.fetch(path, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: raw ?? JSON.stringify(body) }),
    poll: async (id, path = `/v1/audio/transcriptions/jobs/${id}`) => {
      const res = await stack.fetch(path, { headers: { authorization: `Bearer ${key}` } });
      return { status: res.status, body: (await res.json()) as JobView };
    },
  };
}

async function waitForJob(client: Client, id: string, until: (v: JobView) => boolean, timeoutMs = 150_000): Promise<JobView> {
  return waitFor(
    async () => {
      const { status, body } = await client.poll(id);
      return status === 200 && until(body) ? body : undefined;
    },
    { timeoutMs, everyMs: 250, what: `job ${id}` },
  );
}

const finished = (v: JobView) => v.status === "complete" || v.status === "errored";

function verifySignatureIndependently(header: string, body: string): boolean {
  const parts = Object.fromEntries(header.split(",").map((p) => p.split("=") as [string, string]));
  const expected = createHmac("sha256", SECRET).update(`${parts.t}.${body}`).digest("hex");
  return Math.abs(Date.now() / 1000 - Number(parts.t)) < 300 && timingSafeEqual(Buffer.from(parts.v1!), Buffer.from(expected));
}

async function runSixtySecondJob(client: Client, label: string) {
  const requestId = `${label}-${randomHex()}`;
  const started = Date.now();
  const res = await client.post({
    audio_url: `${audioServer.url}/speech.wav`,
    request_id: requestId,
    segment_seconds: 10,
    concurrency: 3,
    language: "en",
    webhook_url: `${hookServer.url}/hook`,
    metadata: { case: label },
  });
  expect(res.status).toBe(202);
  const submitted = (await res.json()) as { request_id: string; workflow_id: string; status: string; endpoint: string };
  expect(submitted).toMatchObject({ request_id: requestId, status: "queued", endpoint: `/v1/audio/transcriptions/jobs/${submitted.workflow_id}` });
  expect(submitted.workflow_id).toMatch(/^[0-9a-f-]{36}$/);

  // Watch the steps while it runs: never more than 3 chunks in flight.
  let maxInFlight = 0;
  let sawRunning = false;
  const view = await waitFor(
    async () => {
      const { status, body } = await client.poll(submitted.workflow_id);
      expect(status).toBe(200);
      if (body.status === "running") sawRunning = true;
      const inFlight = body.steps.filter((s) => s.name.startsWith("transcribe_chunk_") && (s.status === "running" || s.status === "retrying")).length;
      maxInFlight = Math.max(maxInFlight, inFlight);
      return finished(body) ? body : undefined;
    },
    { timeoutMs: 280_000, everyMs: 100, what: "the 60 s job" },
  );
  const wallMs = Date.now() - started;
  expect(view.error).toBeNull();
  expect(view.status).toBe("complete");
  expect(sawRunning).toBe(true);
  expect(maxInFlight).toBeGreaterThan(0);
  expect(maxInFlight).toBeLessThanOrEqual(3);

  const result = view.output!.result;
  expect(result.metadata.chunk_count).toBe(6);
  expect(result.metadata).toMatchObject({ language: "en", model: "stt-large-v3-turbo", request_id: requestId });
  expect(result.metadata.audio_duration_seconds).toBeCloseTo(60, 1);
  expect(result.segments.length).toBeGreaterThan(3);
  let previousStart = 0;
  for (const [i, s] of result.segments.entries()) {
    expect(s.id).toBe(i);
    expect(s.start_time).toBeGreaterThanOrEqual(previousStart);
    expect(s.end_time).toBeGreaterThanOrEqual(s.start_time);
    expect(s.end_time).toBeLessThanOrEqual(60.001);
    expect(s.duration).toBeCloseTo(s.end_time - s.start_time, 3);
    expect(s.confidence).toBeGreaterThanOrEqual(0);
    expect(s.confidence).toBeLessThanOrEqual(1);
    expect(Math.round(s.confidence * 1000) / 1000).toBe(s.confidence);
    expect(s.text.length).toBeGreaterThan(0);
    previousStart = s.start_time;
  }
  // Absolute times: speech late in the file keeps its place (not reset per slice).
  expect(result.segments.at(-1)!.start_time).toBeGreaterThan(40);
  expect(result.summary.num_segments).toBe(result.segments.length);
  expect(result.summary.total_duration).toBeCloseTo(60, 1);
  expect(result.summary.total_speech_duration).toBeCloseTo(result.segments.reduce((a, s) => a + s.duration, 0), 2);
  expect(result.summary.overall_speech_ratio).toBeGreaterThan(0);
  expect(result.summary.overall_speech_ratio).toBeLessThanOrEqual(1);
  const stepNames = view.steps.map((s) => s.name);
  expect(stepNames.slice(0, 2)).toEqual(["fetch", "slice"]);
  expect(stepNames).toContain("aggregate");
  for (const s of view.steps.filter((s) => s.name !== "webhook")) {
    expect(s).toMatchObject({ status: "complete", attempt: 1, error: null });
    expect(Date.parse(s.ended_at!)).toBeGreaterThanOrEqual(Date.parse(s.started_at!));
  }

  // Artifacts of spec 2.7 in the configured object store, in the job's own folder under
  // the request_id (request_ids are per tenant).
  const store = await createObjectStore(client.stack.config.objects);
  const folder = `transcription/${requestId}/${submitted.workflow_id}`;
  const keys = await store.list(`transcription/${requestId}/`);
  for (let i = 0; i < 6; i++) expect(keys).toContain(`${folder}/chunk_${i}.json`);
  expect(keys).toContain(`${folder}/result.json`);
  expect(JSON.parse((await store.get(`${folder}/result.json`))!.toString())).toEqual(result);
  await store.close();

  // One signed webhook with the full result; its delivery shows in the steps.
  const hook = await waitFor(async () => hooks.find((h) => h.body.includes(submitted.workflow_id)), { what: "webhook" });
  expect(verifySignatureIndependently(String(hook.headers["x-stt-signature"]), hook.body)).toBe(true);
  const payload = JSON.parse(hook.body) as WebhookPayload;
  expect(payload).toMatchObject({ type: "transcription.job.completed", workflow_id: submitted.workflow_id, request_id: requestId, status: "complete", metadata: { case: label } });
  expect(payload.output.result).toEqual(result);
  expect(payload.output.reviewed_result).toBeNull();
  const delivered = await waitForJob(client, submitted.workflow_id, (v) => v.steps.some((s) => s.name === "webhook" && s.status === "complete"));
  expect(delivered.status).toBe("complete");

  // Every event of the job, the webhook's delivery included, was written by the job
  // store, with the id its one rule gives (domain/jobs/store.ts `jobEventId`).
  const { nats } = client.stack;
  const { events } = await loadEvents(nats.js, nats.jsm, nats.topology.streams.jobs.name, jobEventEnvelope, nats.topology.subjects.jobEvent(submitted.workflow_id));
  expect(events.map((r) => r.event.type)).toContain("WebhookDelivered");
  let state: JobState = initialJobState;
  for (const { event } of events) {
    expect(event.metadata.eventId).toBe(jobEventId(submitted.workflow_id, state, event));
    state = evolve(state, event);
  }
  console.log(`[jobs-e2e] ${label}: 60 s audio, 6 chunks, concurrency 3 → complete in ${wallMs} ms`);
  return { submitted, view };
}

describe("batch jobs on the filesystem store", () => {
  let stack: Stack;
  let client: Client;
  let other: Client;

  beforeAll(async () => {
    stack = await startStack({ WEBHOOK_SIGNING_SECRET: SECRET, JOB_WEBHOOK_BACKOFF_MS: "200" });
    client = await clientFor(stack, undefined, "pro");
    other = await clientFor(stack, undefined, "pro");
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("rejects bad submissions with clear 400s and unauthenticated ones with 401", async () => {
    const cases: [unknown, string | undefined, string][] = [
      [undefined, "not json", "invalid_json"],
      [undefined, "[1,2]", "invalid_json"],
      [{}, undefined, "missing_audio_url"],
      [{ audio_url: "ftp://example.com/a.wav" }, undefined, "invalid_audio_url"],
      [{ audio_url: "example.com/a.wav" }, undefined, "invalid_audio_url"],
      [{ audio_url: "https://example.com/a.wav", segment_seconds: 0 }, undefined, "invalid_request"],
      [{ audio_url: "https://example.com/a.wav", concurrency: -1 }, undefined, "invalid_request"],
      [{ audio_url: "https://example.com/a.wav", concurrency: "3" }, undefined, "invalid_request"],
      [{ audio_url: "https://example.com/a.wav", webhook_url: "file:///etc/passwd" }, undefined, "invalid_request"],
      [{ audio_url: "https://example.com/a.wav", request_id: "../../etc" }, undefined, "invalid_request"],
    ];
    for (const [body, raw, code] of cases) {
      const res = await client.post(body, raw);
      expect(res.status, JSON.stringify(body ?? raw)).toBe(400);
      const err = (await res.json()) as { error: { code: string; message: string; type: string } };
      expect(err.error.code, JSON.stringify(body ?? raw)).toBe(code);
      expect(err.error.type).toBe("invalid_request_error");
      expect(err.error.message.length).toBeGreaterThan(5);
    }
    const anon = await stack.fetch("/v1/audio/transcriptions/jobs", { method: "POST", body: JSON.stringify({ audio_url: "https://example.com/a.wav" }) });
    expect(anon.status).toBe(401);
    const anonPoll = await stack.fetch(`/v1/audio/transcriptions/jobs/${crypto.randomUUID()}`);
    expect(anonPoll.status).toBe(401);
  });

  // Real transcription on a shared 2-core machine: generous timeouts (the job itself
  // takes 40-50 s when the machine is otherwise idle).
  it("runs a 60 s real-speech job to completion with artifacts and a signed webhook", { timeout: 300_000 }, async () => {
    const { submitted, view } = await runSixtySecondJob(client, "fs");

    // The three poll routes agree; another tenant gets 404; unknown ids are 404.
    for (const path of [`/v1/audio/transcriptions/${submitted.workflow_id}`, `/${submitted.workflow_id}`]) {
      const alias = await client.poll(submitted.workflow_id, path);
      expect(alias.status).toBe(200);
      expect(alias.body.output).toEqual((await client.poll(submitted.workflow_id)).body.output);
    }
    expect((await other.poll(submitted.workflow_id)).status).toBe(404);
    expect((await other.poll(submitted.workflow_id, `/${submitted.workflow_id}`)).status).toBe(404);
    expect((await client.poll(crypto.randomUUID())).status).toBe(404);
    expect((await client.poll("not-a-uuid")).status).toBe(404);

    // Resubmitting the request_id is the same job; another tenant using it gets a job of
    // its own (test/tenancy-scope.test.ts runs two such jobs side by side).
    const again = await client.post({ audio_url: `${audioServer.url}/speech.wav`, request_id: view.request_id });
    expect(again.status).toBe(202);
    expect(((await again.json()) as { workflow_id: string }).workflow_id).toBe(submitted.workflow_id);
    const legacy = await client.post({ audio_url: `${audioServer.url}/speech.wav`, request_id: view.request_id }, undefined, "/");
    expect(legacy.status).toBe(202);
    expect(((await legacy.json()) as { workflow_id: string }).workflow_id).toBe(submitted.workflow_id);
    const reused = await other.post({ audio_url: `${audioServer.url}/missing.wav`, request_id: view.request_id });
    expect(reused.status).toBe(202);
    expect(((await reused.json()) as { workflow_id: string }).workflow_id).not.toBe(submitted.workflow_id);
    expect((await client.poll(submitted.workflow_id)).body.status).toBe("complete");

    // The job's audio seconds were recorded for the quota.
    const usage = await waitFor(
      async () => {
        const row = await stack.db.selectFrom("usage_windows").select(["audio_seconds"]).where("owner_id", "=", client.owner).executeTakeFirst();
        return row && Number(row.audio_seconds) >= 59 ? row : undefined;
      },
      { what: "usage" },
    );
    expect(Number(usage.audio_seconds)).toBeCloseTo(60, 0);
  });

  it("refuses SSRF targets and reports unreachable, missing and non-audio URLs as errored jobs", async () => {
    const cases: [string, string][] = [
      ["http://169.254.169.254/latest/meta-data/", "url_not_allowed"],
      ["http://[fd00:ec2::254]/latest/meta-data/", "url_not_allowed"],
      ["http://127.0.0.1:1/unreachable.wav", "fetch_failed"],
      [`${audioServer.url}/missing.wav`, "audio_not_found"],
      [`${audioServer.url}/page.html`, "unsupported_media_type"],
      [`${audioServer.url}/noise.bin`, "undecodable_audio"],
    ];
    const ids = await Promise.all(
      cases.map(async ([url]) => {
        const res = await client.post({ audio_url: url });
        expect(res.status).toBe(202);
        return ((await res.json()) as { workflow_id: string }).workflow_id;
      }),
    );
    for (const [i, [url, code]] of cases.entries()) {
      const view = await waitForJob(client, ids[i]!, finished, 60_000);
      expect(view.status, url).toBe("errored");
      expect(view.error, url).toMatchObject({ code });
      expect(view.error!.message.length).toBeGreaterThan(5);
      expect(view.output).toBeNull();
      expect(view.steps[0]).toMatchObject({ name: "fetch", status: "errored", error: { code } });
    }
  });

  it("never posts a webhook to a refused target, and the job still completes", { timeout: 200_000 }, async () => {
    const res = await client.post({ audio_url: `${audioServer.url}/short.wav`, webhook_url: "http://169.254.169.254/latest/meta-data/" });
    const { workflow_id } = (await res.json()) as { workflow_id: string };
    const view = await waitForJob(client, workflow_id, (v) => v.steps.some((s) => s.name === "webhook" && s.status === "errored"), 180_000);
    expect(view.status).toBe("complete");
    expect(view.output!.result.segments.length).toBeGreaterThan(0);
    expect(view.steps.find((s) => s.name === "webhook")).toMatchObject({ status: "errored", error: { code: "url_not_allowed" } });
  });

  it("describes the job routes in the OpenAPI document and refuses oversized bodies", async () => {
    const doc = (await (await stack.fetch("/openapi.json")).json()) as { paths: Record<string, unknown> };
    for (const path of ["/v1/audio/transcriptions/jobs", "/v1/audio/transcriptions/jobs/{workflowId}", "/v1/audio/transcriptions/{workflowId}", "/{workflowId}", "/"]) {
      expect(Object.keys(doc.paths)).toContain(path);
    }
    const big = await client.post({ audio_url: "https://example.com/a.wav", metadata: { blob: "x".repeat(300_000) } });
    expect(big.status).toBe(413);
    expect(((await big.json()) as { error: { code: string } }).error.code).toBe("request_too_large");
  });

  it("fails a job whose audio is longer than the plan allows", async () => {
    // The free plan allows 900 s; ffmpeg's lavfi is not reachable by URL, so serve a long file.
    const long = encodeWav(new Int16Array(16000 * 901));
    const server = await startHttp((_req, res) => {
      res.writeHead(200, { "content-type": "audio/wav" });
      res.end(long);
    });
    try {
      const free = await clientFor(stack);
      const res = await free.post({ audio_url: `${server.url}/long.wav` });
      expect(res.status).toBe(202);
      const { workflow_id } = (await res.json()) as { workflow_id: string };
      const view = await waitForJob(free, workflow_id, finished, 60_000);
      expect(view.status).toBe("errored");
      expect(view.error).toMatchObject({ code: "audio_too_long" });
    } finally {
      await server.stop();
    }
  });

  // review: true with no review model now runs the embedded reviewer: test/jobs-review-embedded.test.ts.
});

describe("batch jobs on the S3 store", () => {
  let s3: LocalS3;
  let stack: Stack;

  beforeAll(async () => {
    s3 = await startLocalS3();
    stack = await startStack({
      WEBHOOK_SIGNING_SECRET: SECRET,
      OBJECT_STORE: "s3",
      S3_ENDPOINT: s3.endpoint,
      S3_BUCKET: s3.bucket,
      S3_ACCESS_KEY_ID: "S3RVER",
      S3_SECRET_ACCESS_KEY: "S3RVER",
    });
  });
  afterAll(async () => {
    await stack?.stop();
    await s3?.stop();
  });

  it("runs the same 60 s job with its artifacts in S3", { timeout: 300_000 }, async () => {
    expect(stack.config.objects.backend).toBe("s3");
    await runSixtySecondJob(await clientFor(stack, undefined, "pro"), "s3");
  });
});
