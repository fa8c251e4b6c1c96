import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectRt, wsUrl } from "./support/realtime-support";
import { waitFor } from "./support/jobs-helpers";
import { startStack, type Stack } from "./support/stack";
import { startServiceProcess } from "./support/service-process";
import { rateBlockSize } from "../shared/rate-limit";

/** Request limits with OpenAI's header names, and lastUsedAt from WebSocket use. */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

/** Windows are fixed minutes: start a counting test early in one. */
async function freshMinute() {
  const second = new Date().getUTCSeconds();
  if (second > 45) await new Promise((r) => setTimeout(r, (61 - second) * 1000));
}

describe("rate limits", () => {
  it("the 13th session token in a minute on the free plan is 429 with OpenAI's headers", async () => {
    await freshMinute();
    const { key } = await stack.issueKey("free", "rl");
    const issue = () => stack.fetch("/v1/audio/transcriptions/session-token", { method: "POST", headers: { authorization: `Bearer ${key}` } });
    for (let i = 1; i <= 12; i++) {
      const res = await issue();
      expect(res.status, `token ${i}`).toBe(200);
      expect(res.headers.get("x-ratelimit-limit-requests")).toBe("12");
      expect(res.headers.get("x-ratelimit-remaining-requests")).toBe(String(12 - i));
      expect(res.headers.get("x-ratelimit-reset-requests")).toMatch(/^\d+s$/);
    }
    const refused = await issue();
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(refused.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    expect(await refused.json()).toMatchObject({ error: { code: "rate_limit_exceeded", type: "rate_limit_error" } });
    // the same window is shared with the other counted routes
    const job = await stack.fetch("/v1/audio/transcriptions/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ audio_url: "https://127.0.0.1:1/a.wav" }),
    });
    expect(job.status).toBe(429);
  });

  it("counted in blocks (limit 100: 5 per take), one gateway still admits exactly the limit with exact remaining headers", async () => {
    await freshMinute();
    const limit = 100;
    expect(rateBlockSize(limit)).toBe(5);
    const { key } = await stack.issueKey("pro", "rl-block", { limits: { maxRequestsPerMinute: limit } });
    const issue = () => stack.fetch("/v1/audio/transcriptions/session-token", { method: "POST", headers: { authorization: `Bearer ${key}` } });
    for (let i = 1; i <= limit; i++) {
      const res = await issue();
      expect(res.status, `token ${i}`).toBe(200);
      expect(res.headers.get("x-ratelimit-remaining-requests"), `token ${i}`).toBe(String(limit - i));
    }
    expect((await issue()).status).toBe(429);
  });

  it("a key served by two gateway processes is never admitted past its limit, and at most one block is held back", async () => {
    await freshMinute();
    const child = await startServiceProcess(stack, "http-gateway");
    try {
      const limit = 100;
      const { key } = await stack.issueKey("pro", "rl-two", { limits: { maxRequestsPerMinute: limit } });
      const bases = [stack.baseUrl, `http://127.0.0.1:${child.port}`];
      const total = 140;
      let sent = 0;
      let admitted = 0;
      let refused = 0;
      const lane = async (i: number) => {
        while (sent < total) {
          sent++;
          const res = await fetch(`${bases[i % 2]}/v1/audio/transcriptions/session-token`, { method: "POST", headers: { authorization: `Bearer ${key}` } });
          await res.arrayBuffer();
          if (res.status === 200) admitted++;
          else if (res.status === 429) refused++;
        }
      };
      await Promise.all(Array.from({ length: 8 }, (_, i) => lane(i)));
      expect(admitted + refused).toBe(total);
      expect(admitted).toBeLessThanOrEqual(limit);
      expect(admitted).toBeGreaterThanOrEqual(limit - rateBlockSize(limit));
    } finally {
      await child.kill();
    }
  });

  it("a key used only over WebSocket gets lastUsedAt", async () => {
    const { key, id } = await stack.issueKey("free", "ws-only");
    const record = async () =>
      ((await (await stack.fetch(`/v1/external-transcription/keys/${id}`, { headers: { authorization: `Bearer ${stack.adminToken}` } })).json()) as any).data;
    expect((await record()).lastUsedAt).toBeNull();
    const rt = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await rt.next("session.created");
    rt.ws.close(1000);
    await rt.closed;
    const used = await waitFor(async () => (await record()).lastUsedAt as string | null, { timeoutMs: 10_000, what: "lastUsedAt" });
    expect(Date.now() - new Date(used!).getTime()).toBeLessThan(120_000);
  });
});
