import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consumeRate } from "../shared/rate-limit";
import { startStack, type Stack } from "./support/stack";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

// Every route of spec 4.1, as OpenAPI path templates.
const specRoutes: Array<[string, string]> = [
  ["get", "/v1/audio/transcriptions/stream"],
  ["post", "/v1/audio/transcriptions"],
  ["post", "/v1/audio/transcriptions/jobs"],
  ["get", "/v1/audio/transcriptions/jobs/{workflowId}"],
  ["get", "/v1/audio/transcriptions/{workflowId}"],
  ["get", "/{workflowId}"],
  ["post", "/v1/audio/transcriptions/session-token"],
  ["get", "/health"],
  ["get", "/readyz"],
  ["get", "/v1/external-transcription/plans"],
  ["post", "/v1/external-transcription/keys"],
  ["get", "/v1/external-transcription/keys"],
  ["get", "/v1/external-transcription/keys/{id}"],
  ["delete", "/v1/external-transcription/keys/{id}"],
];

describe("health, readiness, OpenAPI and docs", () => {
  it("/health is 200 and /readyz reports ready with its checks", async () => {
    const health = await stack.fetch("/health");
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok" });
    const ready = await stack.fetch("/readyz");
    const body = await ready.json();
    expect(ready.status).toBe(200);
    expect(body.status).toBe("ready");
    expect(Object.keys(body.checks)).toEqual(expect.arrayContaining(["nats", "postgres", "projection:api_keys", "projection:usage_windows"]));
  });

  it("/openapi.json is OpenAPI 3.1 and documents every route of the spec", async () => {
    const res = await stack.fetch("/openapi.json");
    expect(res.status).toBe(200);
    const doc = await res.json();
    expect(doc.openapi).toBe("3.1.0");
    const missing = specRoutes.filter(([method, path]) => !doc.paths?.[path]?.[method]);
    expect(missing).toEqual([]);
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: "http", scheme: "bearer" });
    expect(doc.components.schemas.ApiKey.properties).toHaveProperty("lastFour");
    // both realtime doors document resuming a session and its refusals
    for (const path of ["/v1/audio/transcriptions/stream", "/v1/realtime"]) {
      const route = doc.paths[path].get;
      expect(route.parameters.map((p: { name: string }) => p.name)).toEqual(expect.arrayContaining(["resume", "last_event_id"]));
      expect(Object.keys(route.responses)).toEqual(expect.arrayContaining(["400", "403", "409", "410", "426"]));
    }
  });

  it("/docs renders the interactive reference from self-hosted assets", async () => {
    const page = await stack.fetch("/docs");
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain("/openapi.json");
    const js = await stack.fetch("/docs/assets/swagger-ui-bundle.js");
    expect(js.status).toBe(200);
    expect((await js.text()).length).toBeGreaterThan(100_000);
  });

  it("unknown routes answer 404 in the OpenAI envelope", async () => {
    const res = await stack.fetch("/v1/nothing/here");
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: { message: expect.any(String), type: "invalid_request_error", code: "not_found", param: null } });
  });

  it("a plain GET of the stream path is 426 websocket_required", async () => {
    const res = await stack.fetch("/v1/audio/transcriptions/stream");
    expect(res.status).toBe(426);
    expect((await res.json()).error.code).toBe("websocket_required");
  });
});

describe("per-key request rate (shared by every plane)", () => {
  it("allows the plan's requests per minute, then 429 rate_limit_exceeded with Retry-After, across clients", async () => {
    const now = new Date();
    const results = await Promise.allSettled(Array.from({ length: 15 }, () => consumeRate(stack.nats, "key_rate", "requests", 12, now)));
    const ok = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(ok).toHaveLength(12);
    expect(refused).toHaveLength(3);
    expect(refused[0]!.reason).toMatchObject({ code: "rate_limit_exceeded", status: 429 });
    expect(Number(refused[0]!.reason.headers["Retry-After"])).toBeGreaterThan(0);
    // another key is independent; the next minute starts afresh
    await expect(consumeRate(stack.nats, "key_other", "requests", 12, now)).resolves.toMatchObject({ remaining: 11 });
    await expect(consumeRate(stack.nats, "key_rate", "requests", 12, new Date(now.getTime() + 60_000))).resolves.toMatchObject({ remaining: 11 });
  });
});
