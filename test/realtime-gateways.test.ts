import { spawn, type ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { connectRt, refusal, wsUrl } from "./support/realtime-support";

/**
 * Admission across gateway processes: a second `stt serve` process running only the
 * realtime gateway shares the stack's NATS (prefix) and Postgres (schema). The free
 * plan's single concurrent connection must hold across both, and the lease of a
 * gateway killed with SIGKILL (no cleanup at all) must stop counting within its TTL.
 */
const LEASE_TTL_MS = 3000;
let stack: Stack;
let child: ChildProcess | undefined;

function startGatewayProcess(): Promise<{ proc: ChildProcess; baseUrl: string }> {
  const proc = spawn(process.execPath, ["--import", "tsx", "services/stt/main.ts", "serve"], {
    cwd: process.cwd(),
    env: {
      ...process.env,
      STT_SERVICES: "realtime-gateway",
      HOST: "127.0.0.1",
      PORT: "0",
      LOG_LEVEL: "info",
      NATS_URL: stack.config.nats.url,
      NATS_PREFIX: stack.config.nats.prefix,
      DATABASE_URL: stack.config.db.url,
      DATABASE_SCHEMA: stack.config.db.schema,
      GATEWAY_SESSION_TOKEN_SECRET: stack.sessionSecret,
      DATA_DIR: `${stack.runtime.ctx.config.dataDir}/gw2`,
      RT_LEASE_TTL_MS: String(LEASE_TTL_MS),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  return new Promise((resolve, reject) => {
    let log = "";
    const timer = setTimeout(() => reject(new Error(`gateway process did not start:\n${log}`)), 60_000);
    const onData = (chunk: Buffer) => {
      log += chunk.toString();
      const m = /"msg":"stt is up".*?"port":(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, baseUrl: `http://127.0.0.1:${m[1]}` });
      }
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    proc.on("exit", (code) => reject(new Error(`gateway process exited ${code}:\n${log}`)));
  });
}

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  if (child && child.exitCode === null) child.kill("SIGKILL");
  await stack?.stop();
});

describe("admission across two gateway processes", () => {
  it("holds the free plan's one connection across gateways; a killed gateway's lease frees within its TTL", async () => {
    const { proc, baseUrl: other } = await startGatewayProcess();
    child = proc;
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
    proc.kill("SIGKILL");
    await new Promise((r) => proc.once("exit", r));
    await new Promise((r) => setTimeout(r, LEASE_TTL_MS + 200 - (Date.now() - killedAt)));
    const again = await connectRt(wsUrl(stack.baseUrl), auth);
    expect((await again.next("session.created")).plan).toBe("free");
    expect(Date.now() - killedAt).toBeLessThan(LEASE_TTL_MS + 2000);
    again.ws.close();
    await again.closed;
  });
});
