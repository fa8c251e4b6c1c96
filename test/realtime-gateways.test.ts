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

describe("admission across two gateway processes", () => {
  it("holds the free plan's one connection across gateways; a killed gateway's lease frees within its TTL", async () => {
    child = await startServiceProcess(stack, "realtime-gateway", { RT_LEASE_TTL_MS: String(LEASE_TTL_MS) });
    const other = `http://127.0.0.1:${child.port}`;
    const { key } = await stack.issueKey("free");
    const auth = { authorization: `Bearer ${key}` };

    // a session on gateway A blocks gateway B
    const a = await connectRt(wsUrl(stack.baseUrl), auth);
    await a.next("session.created");
    const refusedOnB = await refusal(wsUrl(other), auth);
    expect(refusedOnB.body).toMatchObject({ error: { code: "too_many_connections" } });
    expect(refusedOnB.status).toBe(429);
    expect(refusedOnB.body.error.code).toBe("too_many_connections");
    a.ws.close();
    await a.closed;
    await new Promise((r) => setTimeout(r, 300));

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
    await new Promise((r) => setTimeout(r, LEASE_TTL_MS + 200 - (Date.now() - killedAt)));
    const again = await connectRt(wsUrl(stack.baseUrl), auth);
    expect((await again.next("session.created")).plan).toBe("free");
    expect(Date.now() - killedAt).toBeLessThan(LEASE_TTL_MS + 2000);
    again.ws.close();
    await again.closed;
  });
});
