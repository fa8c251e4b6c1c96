import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { connectRt, refusal, wsUrl, type RtClient } from "./support/realtime-support";
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
