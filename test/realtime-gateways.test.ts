import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { connectRt, refusal, wsUrl } from "./support/realtime-support";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";

/**
 * Admission across gateway processes: a second `stt serve` process running only the
 * realtime gateway shares the stack's NATS (prefix) and Postgres (schema). The free
 * plan's single concurrent connection must hold across both, and the lease of a
 * gateway killed with SIGKILL (no cleanup at all) must stop counting within its TTL.
 */
const LEASE_TTL_MS = 3000;
let stack: Stack;
let child: ServiceProcess | undefined;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await child?.kill();
  await stack?.stop();
});

describe("session tokens across two gateway processes", () => {
  it("an rt_ token opens one connection: a second upgrade with it is refused on either gateway, also when both race", async () => {
    const tokenChild = await startServiceProcess(stack, "realtime-gateway");
    try {
      const other = `http://127.0.0.1:${tokenChild.port}`;
      const { key } = await stack.issueKey("pro", "tenant-tokens");
      const newToken = async () => {
        const res = await stack.fetch("/v1/audio/transcriptions/session-token", { method: "POST", headers: { authorization: `Bearer ${key}` } });
        expect(res.status).toBe(200);
        return ((await res.json()) as { token: string }).token;
      };

      // First use on gateway A opens a session; the same token is refused on B and on A.
      const token = await newToken();
      const first = await connectRt(wsUrl(stack.baseUrl, `access_token=${encodeURIComponent(token)}`));
      expect((await first.next("session.created")).plan).toBe("pro");
      for (const [base, param] of [[other, "access_token"], [stack.baseUrl, "token"]] as const) {
        const again = await refusal(wsUrl(base, `${param}=${encodeURIComponent(token)}`));
        expect(again.body).toMatchObject({ error: { code: "invalid_session_token" } });
        expect(again.status).toBe(401);
        expect(again.body.error.code).toBe("invalid_session_token");
      }
      // As a Bearer header too: the token is spent, whatever the transport.
      const asHeader = await refusal(wsUrl(other), { authorization: `Bearer ${token}` });
      expect(asHeader.status).toBe(401);
      expect(asHeader.body.error.code).toBe("invalid_session_token");
      first.ws.close();
      await first.closed;

      // Closing the session does not give the token back.
      expect((await refusal(wsUrl(stack.baseUrl, `access_token=${encodeURIComponent(token)}`))).status).toBe(401);

      // One fresh token presented to both gateways at the same moment: exactly one wins.
      for (let round = 0; round < 5; round++) {
        const raced = await newToken();
        const outcomes = await Promise.allSettled([stack.baseUrl, other].map((base) => connectRt(wsUrl(base, `access_token=${encodeURIComponent(raced)}`))));
        const won = outcomes.filter((o) => o.status === "fulfilled");
        const lost = outcomes.filter((o): o is PromiseRejectedResult => o.status === "rejected");
        expect(won).toHaveLength(1);
        expect(lost[0]!.reason).toMatchObject({ status: 401, body: { error: { code: "invalid_session_token" } } });
        const c = (won[0] as PromiseFulfilledResult<Awaited<ReturnType<typeof connectRt>>>).value;
        await c.next("session.created");
        c.ws.close();
        await c.closed;
      }

      // A new token still works on B: tokens are spent one by one, not per key.
      const fresh = await connectRt(wsUrl(other, `access_token=${encodeURIComponent(await newToken())}`));
      expect((await fresh.next("session.created")).plan).toBe("pro");
      fresh.ws.close();
      await fresh.closed;
    } finally {
      await tokenChild.kill();
    }
  });
});

describe("admission across two gateway processes", () => {
  it("holds the free plan's one connection across gateways; a killed gateway's lease frees within its TTL", async () => {
    child = await startServiceProcess(stack, "realtime-gateway", { RT_LEASE_TTL_MS: String(LEASE_TTL_MS) });
    const other = `http://127.0.0.1:${child.port}`;
    const { key, id: keyId } = await stack.issueKey("free");
    const auth = { authorization: `Bearer ${key}` };
    /** The key's sessions holding a connection slot (the shared lease entry). */
    const leasedSessions = async () => {
      const entry = await (await stack.nats.kv("leases")).get(`conn.${keyId}`);
      return entry && entry.length > 0 ? Object.keys((entry.json() as { leases: Record<string, unknown> }).leases) : [];
    };

    // a session on gateway A blocks gateway B
    const a = await connectRt(wsUrl(stack.baseUrl), auth);
    await a.next("session.created");
    const refusedOnB = await refusal(wsUrl(other), auth);
    expect(refusedOnB.body).toMatchObject({ error: { code: "too_many_connections" } });
    expect(refusedOnB.status).toBe(429);
    expect(refusedOnB.body.error.code).toBe("too_many_connections");
    a.ws.close();
    await a.closed;
    // A releases the slot as the session ends (no connection attempts to poll with: the
    // free plan allows six a minute)
    for (const deadline = Date.now() + 30_000; (await leasedSessions()).length > 0; ) {
      if (Date.now() > deadline) throw new Error("gateway A never released the closed session's lease");
      await new Promise((r) => setTimeout(r, 50));
    }

    // now a session on B blocks A
    const b = await connectRt(wsUrl(other), auth);
    expect((await b.next("session.created")).plan).toBe("free");
    await new Promise((r) => setTimeout(r, LEASE_TTL_MS)); // B renews its lease meanwhile
    const refusedOnA = await refusal(wsUrl(stack.baseUrl), auth);
    expect(refusedOnA.status).toBe(429);
    expect(refusedOnA.body.error.code).toBe("too_many_connections");

    // B dies without any cleanup: its lease stops counting within the TTL
    const killedAt = Date.now();
    await child.kill();
    // its last renewal was before the kill, so its lease has expired by then however
    // loaded the machine (the TTL is the behaviour: no sooner would be wrong too, and
    // B's lease held a full TTL above)
    await new Promise((r) => setTimeout(r, LEASE_TTL_MS + 200 - (Date.now() - killedAt)));
    const again = await connectRt(wsUrl(stack.baseUrl), auth);
    expect((await again.next("session.created")).plan).toBe("free");
    again.ws.close();
    await again.closed;
  });
});
