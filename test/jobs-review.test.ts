import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { startStack, type Stack } from "./support/stack";
import { createObjectStore } from "../shared/objects/index";
import type { JobView, WebhookPayload } from "../schemas/jobs";
import { randomHex, readBody, startHttp, waitFor, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { fixturePath } from "./support/fixtures";

// The two-stage review against a real local HTTP server speaking the OpenAI
// chat-completions protocol. Its "model" is a fixed rule (stage 1 proposes the
// upper-cased text of every segment, stage 2 accepts every proposal), so the test can
// tell exactly which text came from the review.
const AUDIO = readFileSync(fixturePath("jfk.wav"));

let audioServer: LocalHttp;
let llm: LocalHttp;
let hookServer: LocalHttp;
let stack: Stack;
const llmCalls: { system: string; user: Record<string, unknown>; auth?: string }[] = [];
const hooks: string[] = [];

beforeAll(async () => {
  audioServer = await startHttp((_req, res) => {
    res.writeHead(200, { "content-type": "audio/wav" });
    res.end(AUDIO);
  });
  llm = await startHttp(async (req, res) => {
    const body = JSON.parse((await readBody(req)).toString()) as { messages: { role: string; content: string }[] };
    const system = body.messages[0]!.content;
    const user = JSON.parse(body.messages[1]!.content) as Record<string, any>;
    llmCalls.push({ system, user, auth: req.headers.authorization });
    let answer: unknown;
    if (req.url !== "/v1/chat/completions") {
      res.writeHead(404);
      res.end();
      return;
    }
    if (Array.isArray(user.proposed_corrections)) {
      answer = { segments: user.proposed_corrections.map((c: any) => ({ id: c.segment_id, text: c.text })), notes: "accepted all" };
    } else {
      answer = { corrections: user.segments.map((s: any) => ({ segment_id: s.segment_id, text: String(s.text).toUpperCase(), reason: "shout" })), notes: `slice ${user.slice.index}` };
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "c1", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: JSON.stringify(answer) }, finish_reason: "stop" }] }));
  });
  // The receiver fails the first delivery: the service must retry it.
  hookServer = await startHttp(async (req, res) => {
    hooks.push((await readBody(req)).toString());
    res.writeHead(hooks.length === 1 ? 503 : 200);
    res.end(hooks.length === 1 ? "try later" : "ok");
  });
  stack = await startStack({ REVIEW_LLM_URL: `${llm.url}/v1`, REVIEW_LLM_API_KEY: "llm-key-123", REVIEW_LLM_MODEL: "test-reviewer", WEBHOOK_SIGNING_SECRET: "s3cret" });
});

afterAll(async () => {
  await stack?.stop();
  for (const s of [audioServer, llm, hookServer]) await s?.stop();
});

describe("review: true", () => {
  it("runs both review stages with the job's metadata and delivers raw and reviewed results", { timeout: 240_000 }, async () => {
    const { key } = await stack.issueKey("pro", `owner-${randomHex()}`);
    const requestId = `review-${randomHex()}`;
    const metadata = { medical_specialty: "cardiology", speaker_roles: ["doctor", "patient"] };
    const res = await stack.fetch("/v1/audio/transcriptions/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ audio_url: `${audioServer.url}/jfk.wav`, request_id: requestId, segment_seconds: 5, review: true, metadata, webhook_url: `${hookServer.url}/h` }),
    });
    expect(res.status).toBe(202);
    const { workflow_id } = (await res.json()) as { workflow_id: string };
    const view = await waitForJobEnd(stack.fetch, key, workflow_id, { timeoutMs: 220_000, what: "the review job" });
    expect(view.error).toBeNull();
    expect(view.status).toBe("complete");
    const { result, reviewed_result } = view.output!;
    const chunks = result.metadata.chunk_count;
    expect(chunks).toBe(3);
    expect(result.segments.length).toBeGreaterThan(0);
    expect(reviewed_result).not.toBeNull();
    expect(reviewed_result!.segments.map((s) => s.text)).toEqual(result.segments.map((s) => s.text.toUpperCase()));
    expect(reviewed_result!.segments.map((s) => [s.start_time, s.end_time])).toEqual(result.segments.map((s) => [s.start_time, s.end_time]));
    expect(reviewed_result!.review).toMatchObject({ model: "test-reviewer", notes: "accepted all" });
    const names = view.steps.map((s) => s.name);
    for (let i = 0; i < chunks; i++) expect(names).toContain(`review_chunk_${i}`);
    expect(names).toContain("review");

    // The model saw the metadata on every call, with the configured key.
    expect(llmCalls.length).toBeGreaterThanOrEqual(2);
    for (const call of llmCalls) {
      expect(call.user.metadata).toEqual(metadata);
      expect(call.auth).toBe("Bearer llm-key-123");
    }
    expect(llmCalls.filter((c) => Array.isArray(c.user.proposed_corrections))).toHaveLength(1);

    const store = await createObjectStore(stack.config.objects);
    const keys = await store.list(`transcription/${requestId}/`);
    for (let i = 0; i < chunks; i++) expect(keys).toContain(`transcription/${requestId}/${workflow_id}/review_chunk_${i}.json`);
    expect(keys).toContain(`transcription/${requestId}/${workflow_id}/reviewed_result.json`);
    await store.close();

    // First delivery refused (503), retried with backoff, then accepted; both recorded.
    await waitFor(async () => hooks.filter((h) => h.includes(workflow_id)).length >= 2 || undefined, { what: "webhook retry" });
    expect(hooks[0]).toBe(hooks[1]);
    const delivered = await waitFor(
      async () => {
        const r = await stack.fetch(`/v1/audio/transcriptions/jobs/${workflow_id}`, { headers: { authorization: `Bearer ${key}` } });
        const v = (await r.json()) as JobView;
        return v.steps.find((s) => s.name === "webhook" && s.status === "complete") ? v : undefined;
      },
      { what: "webhook step complete" },
    );
    expect(delivered.status).toBe("complete");
    const payload = JSON.parse(hooks[1]!) as WebhookPayload;
    expect(payload.output.result).toEqual(result);
    expect(payload.output.reviewed_result).toEqual(reviewed_result);
    expect(payload.metadata).toEqual(metadata);
  });
});
