import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { connectRt, refusal, wsUrl, type RtClient } from "./support/realtime-support";
import { cut } from "./support/resume";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";

/**
 * Revocation reaches open WebSocket sessions on every gateway (docs/realtime.md, close
 * 1008 `key_revoked`), and bursts of upgrades and reconnects of one key are the
 * server's contention to absorb, not the client's (docs/keys-and-auth.md).
 */
let stack: Stack;
let child: ServiceProcess | undefined;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await child?.kill();
  await stack?.stop();
});

/** Revocation is a feed event applied in milliseconds; this bound holds on a busy machine. */
const REVOCATION_CLOSE_BOUND_MS = 5000;

describe("revocation closes open sessions", () => {
  it("a revoked key's sessions on two gateway processes close 1008 key_revoked within seconds; new upgrades are 401", async () => {
    child = await startServiceProcess(stack, "realtime-gateway");
    const other = `http://127.0.0.1:${child.port}`;
    const { key, id } = await stack.issueKey("pro", "revoke-sessions");
    const bystander = await stack.issueKey("pro", "revoke-sessions");
    const auth = { authorization: `Bearer ${key}` };
    const sessions = [await connectRt(wsUrl(stack.baseUrl), auth), await connectRt(wsUrl(other), auth), await connectRt(wsUrl(other), auth)];
    for (const s of sessions) await s.next("session.created");
    // another key's session on the same gateways stays open
    const kept = await connectRt(wsUrl(other), { authorization: `Bearer ${bystander.key}` });
    await kept.next("session.created");

    const del = await stack.fetch(`/v1/external-transcription/keys/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.adminToken}` } });
    expect(del.status).toBe(200);
    const revokedAt = Date.now();
    const closes = await Promise.all(
      sessions.map((s) =>
        Promise.race([s.closed.then((c) => ({ ...c, after: Date.now() - revokedAt })), new Promise<never>((_, rej) => setTimeout(() => rej(new Error("session still open 30 s after revocation")), 30_000))]),
      ),
    );
    for (const c of closes) {
      expect({ code: c.code, reason: c.reason }).toEqual({ code: 1008, reason: "key_revoked" });
      expect(c.after).toBeLessThan(REVOCATION_CLOSE_BOUND_MS);
    }
    for (const base of [stack.baseUrl, other]) {
      const again = await refusal(wsUrl(base), auth);
      expect(again.status).toBe(401);
      expect(again.body.error.code).toBe("revoked_api_key");
    }
    expect(kept.ws.readyState).toBe(kept.ws.OPEN);
    kept.ws.close();
    await kept.closed;
  });
});

describe("bursts of upgrades and reconnects", () => {
  const openAll = (n: number, base: string, auth: Record<string, string>) =>
    Promise.allSettled(Array.from({ length: n }, () => connectRt(wsUrl(base), auth).then(async (c) => (await c.next("session.created", 60_000), c))));

  const closeAll = async (clients: RtClient[]) => {
    for (const c of clients) c.ws.close();
    await Promise.all(clients.map((c) => c.closed));
  };

  it("200 simultaneous upgrades of a generous key all open (a refusal would need Retry-After and not be rate_limiter_unavailable)", async () => {
    const { key } = await stack.issueKey("pro", "burst", { limits: { maxConnectionsPerMinute: 10_000, maxConcurrentConnections: 1_000 } });
    const outcomes = await openAll(200, stack.baseUrl, { authorization: `Bearer ${key}` });
    const opened = outcomes.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
    const refused = outcomes.flatMap((o) => (o.status === "rejected" ? [o.reason as { status?: number; headers?: Record<string, string>; body?: any }] : []));
    try {
      const described = refused.map((r) => `${r.status} ${r.body?.error?.code ?? String(r)} retry-after=${r.headers?.["retry-after"]}`);
      for (const r of refused) {
        expect(r.body?.error?.code, described.join("; ")).not.toBe("rate_limiter_unavailable");
        expect(String(r.headers?.["retry-after"]), described.join("; ")).toMatch(/^\d+$/);
      }
      expect(described).toEqual([]);
      expect(opened).toHaveLength(200);
    } finally {
      await closeAll(opened);
    }
  });

  it("50 sessions closed at once and reopened at once: no reopen is refused (every slot was released)", async () => {
    const { key } = await stack.issueKey("pro", "reconnect", { limits: { maxConnectionsPerMinute: 10_000, maxConcurrentConnections: 50 } });
    const auth = { authorization: `Bearer ${key}` };
    for (let round = 0; round < 2; round++) {
      const first = await openAll(50, stack.baseUrl, auth);
      const opened = first.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
      expect(opened).toHaveLength(50);
      // the key is full: one more is refused
      expect((await refusal(wsUrl(stack.baseUrl), auth)).body.error.code).toBe("too_many_connections");
      await closeAll(opened);
      const again = await openAll(50, stack.baseUrl, auth);
      const reopened = again.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
      const refused = again.flatMap((o) => (o.status === "rejected" ? [(o.reason as { body?: any }).body?.error?.code ?? String(o.reason)] : []));
      expect(refused).toEqual([]);
      expect(reopened).toHaveLength(50);
      await closeAll(reopened);
    }
  });
});

describe("revocation ends held sessions for good, and keys stay out of URLs", () => {
  const revoke = (id: string) => stack.fetch(`/v1/external-transcription/keys/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.adminToken}` } });
  const resumeQuery = (credential: string) => `resume=${encodeURIComponent(credential)}`;

  it("a session held for a resume when its key is revoked cannot be resumed with any key of its owner", async () => {
    const owner = "revoke-held";
    const { key, id } = await stack.issueKey("pro", owner);
    const sibling = await stack.issueKey("pro", owner);
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    const created = await c.next("session.created");
    cut(c); // the connection is lost: the session is held for its grace (30 s)
    await c.closed;
    await new Promise((r) => setTimeout(r, 500));
    expect((await revoke(id)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
    for (const k of [sibling.key, key]) {
      const r = await refusal(wsUrl(stack.baseUrl, resumeQuery(created.resume.credential)), { authorization: `Bearer ${k}` });
      expect(r.status, JSON.stringify(r.body)).toBeGreaterThanOrEqual(400);
      expect(["resume_forbidden", "revoked_api_key", "resume_expired"]).toContain(r.body.error.code);
    }
    // the held session ended (its close is recorded), not left waiting out its grace
    expect((await refusal(wsUrl(stack.baseUrl, resumeQuery(created.resume.credential)), { authorization: `Bearer ${sibling.key}` })).status).toBeGreaterThanOrEqual(400);
  });

  it("a session held before its key was revoked, resumed right after the revocation with a sibling key: refused 403 resume_forbidden", async () => {
    const owner = "revoke-race";
    const { key, id } = await stack.issueKey("pro", owner);
    const sibling = await stack.issueKey("pro", owner);
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    const created = await c.next("session.created");
    cut(c);
    await c.closed;
    expect((await revoke(id)).status).toBe(200);
    const r = await refusal(wsUrl(stack.baseUrl, resumeQuery(created.resume.credential)), { authorization: `Bearer ${sibling.key}` });
    expect(r.status, JSON.stringify(r.body)).toBeGreaterThanOrEqual(400);
    expect(["resume_forbidden", "resume_expired"]).toContain(r.body.error.code);
  });

  it("refuses a key or client secret hidden anywhere in the URL (decoded, trimmed, behind Bearer), on both planes", async () => {
    const { key } = await stack.issueKey("pro", "url-keys");
    const hidden = [`api_key=%20${key}`, `authorization=Bearer%20${key}`, `x=${encodeURIComponent(`"${key}"`)}`, `api_key=%2520${key}`, `token=ek_${"a".repeat(20)}`];
    for (const q of hidden) {
      const r = await refusal(wsUrl(stack.baseUrl, q));
      expect({ q, status: r.status, code: r.body?.error?.code }).toEqual({ q, status: 401, code: "invalid_api_key" });
      expect(r.body.error.message).toMatch(/must not be sent in URLs/);
      const http = await stack.fetch(`/v1/audio/transcriptions/jobs?${q}`, { headers: { authorization: `Bearer ${key}` } });
      expect({ q, status: http.status }).toEqual({ q, status: 401 });
    }
    // an ordinary query value that merely mentions "sk-" is not a key
    const ok = await connectRt(wsUrl(stack.baseUrl, "language=en&note=ask-me"), { authorization: `Bearer ${key}` });
    await ok.next("session.created");
    ok.ws.close();
  });
});
