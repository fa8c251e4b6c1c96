import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jobEventEnvelope, type JobEvent } from "../domain/jobs/events";
import { keyEventEnvelope, type KeyEvent } from "../domain/keys/events";
import { appendEvents } from "../shared/event-store";
import { waitFor } from "./support/jobs-helpers";
import { connectRt, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * Issue 9, item 2: strings JSON allows but Postgres refuses (NUL, lone UTF-16
 * surrogates) are refused at the edge, and an event that reaches the log anyway (an old
 * or foreign writer) is dead-lettered by its projection instead of wedging it.
 */
const run = promisify(execFile);
let stack: Stack;
let key: string;

beforeAll(async () => {
  // No job workers: the jobs read model then changes only through what this test appends.
  stack = await startStack({ STT_SERVICES: "projector,transcriber,http-gateway,realtime-gateway" });
  key = (await stack.issueKey("pro", "poison-owner")).key;
}, 120_000);
afterAll(async () => {
  await stack?.stop();
});

const NUL = "\u0000";
const LONE = "\ud800";
const jobsPath = "/v1/audio/transcriptions/jobs";
const audioUrl = "http://127.0.0.1:9/audio.wav";

const postJson = (path: string, body: unknown, auth: string) =>
  // JSON.stringify writes a lone surrogate as the escape "\ud800" and NUL as "\u0000":
  // exactly the bytes a hostile client sends.
  stack.fetch(path, { method: "POST", headers: { authorization: `Bearer ${auth}`, "content-type": "application/json" }, body: JSON.stringify(body) });

const streamMessages = async (name: string) => (await stack.nats.jsm.streams.info(name)).state.messages;

describe("unstorable strings are refused at the edge", () => {
  it.each([
    ["a metadata value (NUL)", { metadata: { notes: `a${NUL}b` } }, "metadata.notes"],
    ["a nested metadata value (lone surrogate)", { metadata: { roles: [{ name: `x${LONE}` }] } }, "metadata.roles.0.name"],
    ["a metadata key (NUL)", { metadata: { [`k${NUL}`]: 1 } }, "metadata"],
    ["a nested metadata key (lone surrogate)", { metadata: { speakers: { [LONE]: "doctor" } } }, "metadata.speakers"],
    ["prompt (NUL)", { prompt: `hello${NUL}` }, "prompt"],
    ["prompt (lone surrogate)", { prompt: `hello${LONE}` }, "prompt"],
    ["webhook_url (lone surrogate)", { webhook_url: `https://example.com/${LONE}` }, "webhook_url"],
    ["webhook_url (NUL)", { webhook_url: `https://example.com/a${NUL}` }, "webhook_url"],
    ["request_id (NUL)", { request_id: `r${NUL}` }, "request_id"],
    ["request_id (lone surrogate)", { request_id: `r${LONE}` }, "request_id"],
    ["model", { model: `m${NUL}` }, "model"],
    ["language", { language: LONE }, "language"],
  ])("job submission: %s → 400 invalid_string", async (_name, extra, param) => {
    const before = await streamMessages(stack.nats.topology.streams.jobs.name);
    for (const path of [jobsPath, "/"]) {
      const res = await postJson(path, { audio_url: audioUrl, ...extra }, key);
      expect(res.status).toBe(400);
      const body = await res.json();
      expect(body).toEqual({ error: { message: expect.stringContaining("cannot be stored"), type: "invalid_request_error", code: "invalid_string", param } });
    }
    expect(await streamMessages(stack.nats.topology.streams.jobs.name)).toBe(before);
  });

  it("job submission: metadata deeper than 16 levels or larger than 64 KiB → 400 invalid_request", async () => {
    let deep: Record<string, unknown> = { leaf: 1 };
    for (let i = 0; i < 16; i++) deep = { d: deep };
    const tooDeep = await (await postJson(jobsPath, { audio_url: audioUrl, metadata: deep }, key)).json();
    expect(tooDeep.error).toMatchObject({ code: "invalid_request", param: expect.stringMatching(/^metadata(\.d)+$/) });
    const tooBig = await (await postJson(jobsPath, { audio_url: audioUrl, metadata: { notes: "x".repeat(70_000) } }, key)).json();
    expect(tooBig.error).toMatchObject({ code: "invalid_request", param: "metadata" });
  });

  it.each([
    ["label (NUL)", { label: `l${NUL}` }, "label"],
    ["label (lone surrogate)", { label: `l${LONE}` }, "label"],
    ["owner_id", { owner_id: `o${NUL}` }, "owner_id"],
    ["plan", { plan: `free${LONE}` }, "plan"],
  ])("admin key issue: %s → 400 invalid_string in the admin envelope", async (_name, extra, field) => {
    const before = await streamMessages(stack.nats.topology.streams.keys.name);
    const res = await postJson("/v1/external-transcription/keys", extra, stack.adminToken);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ ok: false, error: { code: "invalid_string", message: expect.stringMatching(new RegExp(`^${field}: .*cannot be stored`)), retryable: false } });
    expect(await streamMessages(stack.nats.topology.streams.keys.name)).toBe(before);
  });

  it("admin key revoke, inspect and list: a NUL id or owner → 400 invalid_string, not a Postgres 500", async () => {
    const admin = { authorization: `Bearer ${stack.adminToken}` };
    for (const [method, path] of [
      ["DELETE", "/v1/external-transcription/keys/k%00"],
      ["GET", "/v1/external-transcription/keys/k%00"],
      ["GET", "/v1/external-transcription/keys?owner_id=o%00"],
    ] as const) {
      const res = await stack.fetch(path, { method, headers: admin });
      expect(res.status, `${method} ${path}`).toBe(400);
      expect((await res.json()).error.code).toBe("invalid_string");
    }
  });

  it("realtime session.update: an unstorable prompt is an error event invalid_string; the session goes on", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    // Sent as raw text: a WebSocket text frame is UTF-8, so the lone surrogate must
    // arrive as a JSON escape to survive to the gateway's JSON.parse.
    c.ws.send('{"type":"session.update","event_id":"ev1","session":{"input_audio_transcription":{"prompt":"a\\ud800"}}}');
    const refused = await c.next("error");
    expect(refused.error).toMatchObject({ type: "invalid_request_error", code: "invalid_string", event_id: "ev1" });
    c.ws.send('{"type":"session.update","session":{"input_audio_transcription":{"model":"m\\u0000"}}}');
    expect((await c.next("error")).error.code).toBe("invalid_string");
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { prompt: "fine" } } });
    expect((await c.next("session.updated")).session.input_audio_transcription.prompt).toBe("fine");
    c.ws.close(1000);
    await c.closed;
  });
});

describe("a projection dead-letters an event it cannot apply and moves on", () => {
  it("jobs and api_keys step over poison events, /readyz stays 200 with the count, and `stt rebuild` records them too", async () => {
    const { topology } = stack.nats;
    const now = new Date().toISOString();
    const spec = (workflowId: string, extra: Record<string, unknown>) =>
      ({ workflowId, requestId: `r-${workflowId}`, ownerId: "poison-owner", keyId: "key_x", audioUrl, model: "m", segmentSeconds: 300, concurrency: 1, review: false, maxAudioSeconds: 3600, at: now, ...extra }) as never;
    // Written straight to the log, as an old or foreign writer would: the event schemas
    // accept these, Postgres does not (jsonb refuses \u0000 and a lone \ud800).
    const nulJob = randomUUID();
    const loneJob = randomUUID();
    await appendEvents<JobEvent>(stack.nats.js, jobEventEnvelope, topology.subjects.jobEvent(nulJob), [{ type: "JobSubmitted", data: spec(nulJob, { metadata: { [`k${NUL}`]: "v" } }) }]);
    await appendEvents<JobEvent>(stack.nats.js, jobEventEnvelope, topology.subjects.jobEvent(loneJob), [{ type: "JobSubmitted", data: spec(loneJob, { prompt: `p${LONE}` }) }]);
    // …and a message that is not even JSON.
    await stack.nats.js.publish(topology.subjects.jobEvent(randomUUID()), new TextEncoder().encode("{not json"));
    // A KeyIssued whose label Postgres `text` refuses (NUL).
    const poisonKeyId = `key_${randomUUID().replace(/-/g, "")}`;
    await appendEvents<KeyEvent>(stack.nats.js, keyEventEnvelope, topology.subjects.keyEvent(poisonKeyId), [
      {
        type: "KeyIssued",
        data: { keyId: poisonKeyId, ownerId: "poison-owner", keyHash: "0".repeat(64), keyPrefix: "sk-poison", lastFour: "xxxx", plan: "free", label: `bad${NUL}`, expiresAt: null, issuedAt: now },
      },
    ]);

    // Later valid writes go through the edge and show up in the read models: a key
    // issued after the poisoned one authenticates, and its job is projected.
    const fresh = await stack.issueKey("pro", "poison-owner");
    const submitted = await postJson(jobsPath, { audio_url: audioUrl, request_id: "after-poison", metadata: { ok: "😀" } }, fresh.key);
    expect(submitted.status).toBe(202);
    const { workflow_id } = await submitted.json();
    const row = await waitFor(() => stack.db.selectFrom("jobs").select(["workflow_id", "status"]).where("workflow_id", "=", workflow_id).executeTakeFirst(), { timeoutMs: 20_000, what: "the valid job in the read model" });
    expect(row.status).toBe("queued");
    expect(await stack.db.selectFrom("jobs").select("workflow_id").where("workflow_id", "in", [nulJob, loneJob]).execute()).toEqual([]);

    const letters = async () => stack.db.selectFrom("projection_dead_letters").selectAll().orderBy("projection").orderBy("seq").execute();
    const live = await letters();
    expect(live.map((l) => [l.projection, l.subject])).toEqual([
      ["api_keys", topology.subjects.keyEvent(poisonKeyId)],
      ["jobs", topology.subjects.jobEvent(nulJob)],
      ["jobs", topology.subjects.jobEvent(loneJob)],
      ["jobs", expect.stringContaining(".job.evt.")],
    ]);
    expect(live[0]!.error).toMatch(/^22021 /); // invalid byte sequence: NUL in text
    expect(live[1]!.error).toMatch(/^22P05 /); // untranslatable character: \u0000 in jsonb
    expect(live[2]!.error).toMatch(/^22P0[25] /); // a lone surrogate escape in jsonb
    expect(live[3]!.error).toMatch(/^SyntaxError/);

    // Caught up past the poison: ready, with the dead letters counted.
    const ready = await waitFor(
      async () => {
        const res = await stack.fetch("/readyz");
        return res.status === 200 ? res.json() : undefined;
      },
      { timeoutMs: 20_000, what: "/readyz 200" },
    );
    expect(ready.checks.dead_letters).toEqual({ ok: true, detail: "4 (api_keys: 1, jobs: 3)" });
    expect(ready.checks["projection:jobs"].ok).toBe(true);

    // The CLI rebuild steps over the same events and records them again.
    const offsetBefore = await stack.db.selectFrom("projection_offsets").select("last_seq").where("name", "=", "jobs").executeTakeFirstOrThrow();
    const env = { ...process.env, NATS_URL: stack.config.nats.url, DATABASE_URL: stack.config.db.url, NATS_PREFIX: stack.config.nats.prefix, DATABASE_SCHEMA: stack.config.db.schema, LOG_LEVEL: "info" };
    const { stderr } = await run("bin/stt", ["rebuild", "jobs"], { env, timeout: 60_000 });
    expect(stderr).toContain("dead-lettered an event it cannot apply");
    expect(stderr).toMatch(/"projection":"jobs".*"dead_lettered":3/);
    const rebuilt = await letters();
    expect(rebuilt.map((l) => [l.projection, l.seq, l.subject, l.error])).toEqual(live.map((l) => [l.projection, l.seq, l.subject, l.error]));
    expect(rebuilt[1]!.recorded_at.getTime()).toBeGreaterThan(live[1]!.recorded_at.getTime());
    expect(await stack.db.selectFrom("jobs").select("workflow_id").execute()).toEqual([{ workflow_id }]);
    expect(await stack.db.selectFrom("projection_offsets").select("last_seq").where("name", "=", "jobs").executeTakeFirstOrThrow()).toEqual(offsetBefore);
    expect((await stack.fetch("/readyz")).status).toBe(200);
  });
});
