import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { connect as tcpConnect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadConfig } from "../shared/config";
import { createDb, dropSchema } from "../shared/db/index";
import { connectNats, destroyTopology } from "../shared/nats";
import { waitFor } from "./support/jobs-helpers";
import { startPrivateNatsServer } from "./support/nats";
import { freePort } from "./support/ports";
import { gone } from "./support/process-gone";
import { spawnService, type ServiceProcess } from "./support/service-process";

/**
 * One instance per port and a bounded stop, on real `stt serve` / `stt supervise`
 * processes against the real nats-server and Postgres:
 * - a second `stt serve` on a taken port exits 1 with a clear message (it used to start
 *   and take half the connections: uWS listened with SO_REUSEPORT); sharing only with
 *   STT_REUSE_PORT=true;
 * - a new `stt serve` whose port is still held waits up to SHUTDOWN_TIMEOUT_MS for it;
 * - a `stt serve` whose supervisor is SIGKILLed while NATS is down exits within
 *   SHUTDOWN_TIMEOUT_MS (it used to wait on each service's stop with no deadline and
 *   kept answering on the port for 10+ minutes).
 */

const dbUrl = loadConfig(process.env).db.url;
const sharedNatsUrl = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const dirs: string[] = [];
const schemas: string[] = [];
const prefixes: string[] = [];
const children: ChildProcess[] = [];

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  const db = createDb({ ...loadConfig(process.env).db });
  for (const s of schemas) await dropSchema(db, s).catch(() => undefined);
  await db.destroy();
  for (const prefix of prefixes) {
    const nats = await connectNats({ url: sharedNatsUrl, prefix }).catch(() => undefined);
    if (nats) {
      await destroyTopology(nats).catch(() => undefined);
      await nats.close();
    }
  }
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The environment of a `stt serve` of its own: NATS prefix, Postgres schema, data dir. */
function ownEnv(extra: Record<string, string> = {}): Record<string, string> {
  const prefix = `t${randomBytes(5).toString("hex")}`;
  const schema = `t_${randomBytes(5).toString("hex")}`;
  const dataDir = mkdtempSync(join(tmpdir(), "stt-lifecycle-"));
  if (!extra.NATS_URL) prefixes.push(prefix);
  schemas.push(schema);
  dirs.push(dataDir);
  return {
    NATS_URL: sharedNatsUrl,
    NATS_PREFIX: prefix,
    DATABASE_URL: dbUrl,
    DATABASE_SCHEMA: schema,
    DATABASE_POOL_MAX: "3",
    DATA_DIR: dataDir,
    GATEWAY_ADMIN_TOKEN: `admin-${randomBytes(8).toString("hex")}`,
    GATEWAY_SESSION_TOKEN_SECRET: `secret-${randomBytes(8).toString("hex")}`,
    STT_SERVICES: "http-gateway,realtime-gateway",
    RT_STREAM_DECODERS_WARM: "0",
    ...extra,
  };
}

async function edge(extra: Record<string, string>): Promise<ServiceProcess> {
  const service = await spawnService(ownEnv(extra), { timeoutMs: 90_000 });
  children.push(service.proc);
  return service;
}

/** Runs `stt serve` to its exit (SIGKILL after `capMs`): its code and everything it printed. */
function serveToExit(env: Record<string, string>, capMs: number): Promise<{ code: number | null; output: string }> {
  const proc = spawn(process.execPath, ["--import", "tsx", "services/stt/main.ts", "serve"], { env: { ...process.env, HOST: "127.0.0.1", LOG_LEVEL: "info", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.push(proc);
  let output = "";
  proc.stdout.on("data", (d) => (output += d));
  proc.stderr.on("data", (d) => (output += d));
  const cap = setTimeout(() => proc.kill("SIGKILL"), capMs);
  return new Promise((resolve) => proc.once("exit", (code) => (clearTimeout(cap), resolve({ code, output }))));
}


const health = (port: number) =>
  fetch(`http://127.0.0.1:${port}/health`, { headers: { connection: "close" } }).then(
    (r) => r.status,
    () => 0,
  );

describe("one instance per port", () => {
  it("a second stt serve on a taken port exits 1 with a clear message; the first keeps serving", async () => {
    const first = await edge({});
    const port = first.port!;
    expect(await health(port)).toBe(200);
    const second = await serveToExit(ownEnv({ PORT: String(port), SHUTDOWN_TIMEOUT_MS: "1000" }), 90_000);
    expect(second.code, second.output).toBe(1);
    expect(second.output).toContain(`cannot listen on 127.0.0.1:${port}: the port is in use by another process`);
    expect(second.output).not.toContain('"msg":"stt is up"');
    expect(await health(port)).toBe(200);
    expect(first.proc.exitCode).toBeNull();
    await first.stop();
  });

  it("the same for a process whose HTTP gateway listens without the realtime gateway (Node's listener)", async () => {
    const blocker = await holdPort();
    const port = (blocker.address() as { port: number }).port;
    const second = await serveToExit(ownEnv({ STT_SERVICES: "http-gateway", PORT: String(port), SHUTDOWN_TIMEOUT_MS: "500" }), 90_000);
    blocker.close();
    expect(second.code, second.output).toBe(1);
    expect(second.output).toContain(`cannot listen on 127.0.0.1:${port}: the port is in use by another process`);
  });

  it("STT_REUSE_PORT=true lets two instances share the port on purpose", async () => {
    // a fixed port: Linux does not share a port the kernel picked (PORT=0)
    const port = String(await freePort());
    const first = await edge({ STT_REUSE_PORT: "true", PORT: port });
    const second = await edge({ STT_REUSE_PORT: "true", PORT: port, SHUTDOWN_TIMEOUT_MS: "0" });
    expect(first.port).toBe(Number(port));
    expect(second.port).toBe(Number(port));
    expect(first.output()).not.toContain("listen port in use");
    expect(second.output()).not.toContain("listen port in use");
    await Promise.all([first.stop(), second.stop()]);
  });

  it("a new stt serve waits for a port still held (a predecessor stopping) and takes it once freed", async () => {
    const blocker = await holdPort();
    const port = (blocker.address() as { port: number }).port;
    let waiting = false;
    const starting = spawnService(ownEnv({ PORT: String(port), SHUTDOWN_TIMEOUT_MS: "120000" }), {
      timeoutMs: 150_000,
      onOutput: (chunk) => {
        if (chunk.toString().includes("listen port in use: waiting")) waiting = true;
      },
    });
    starting.then((s) => children.push(s.proc), () => undefined);
    await waitFor(async () => waiting, { timeoutMs: 90_000, what: "stt serve to report the port in use" });
    await new Promise<void>((r) => blocker.close(() => r()));
    const service = await starting;
    expect(service.port).toBe(port);
    expect(await health(port)).toBe(200);
    await service.stop();
  });

  it("start.sh again right after kill -9 of its supervisor: the new service gets the port, the leftover is gone", async () => {
    const port = await freePort();
    // the same settings twice, as two runs of scripts/start.sh (`exec bin/stt supervise`)
    const env = ownEnv({ PORT: String(port), SHUTDOWN_TIMEOUT_MS: "5000" });
    const first = supervise(env);
    const old = await first.up();
    expect(old.port).toBe(port);
    first.proc.kill("SIGKILL");
    const second = supervise(env);
    let fresh = { pid: 0, port: 0 };
    try {
      fresh = await second.up();
      expect(fresh.port).toBe(port);
      expect(fresh.pid).not.toBe(old.pid);
      await waitFor(async () => gone(old.pid), { timeoutMs: 60_000, what: `the leftover stt serve ${old.pid} to exit` });
      for (let i = 0; i < 5; i++) expect(await health(port)).toBe(200);
      expect(second.output()).not.toContain("cannot listen");
    } finally {
      for (const pid of [old.pid, fresh.pid]) if (pid && !gone(pid)) process.kill(pid, "SIGKILL");
      second.proc.kill("SIGKILL");
    }
  });
});

/** `stt supervise` with `env` (stdout and stderr collected); `up()` waits for its serve's "stt is up" line. */
function supervise(env: Record<string, string>) {
  const proc = spawn(process.execPath, ["--import", "tsx", "services/stt/main.ts", "supervise"], { env: { ...process.env, HOST: "127.0.0.1", LOG_LEVEL: "info", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.push(proc);
  let output = "";
  proc.stdout.on("data", (d) => (output += d));
  proc.stderr.on("data", (d) => (output += d));
  return {
    proc,
    output: () => output,
    up: async (): Promise<{ pid: number; port: number }> => {
      const line = await waitFor(async () => /[^\n]*"msg":"stt is up"[^\n]*/.exec(output)?.[0], { timeoutMs: 120_000, what: "stt serve under supervise to start" }).catch((err) => {
        throw new Error(`${(err as Error).message}:\n${output}`);
      });
      return JSON.parse(line) as { pid: number; port: number };
    },
  };
}

/** A plain exclusive listener on a free port: what a leftover process holding it looks like. */
async function holdPort(): Promise<Server> {
  const port = await freePort();
  const server = createServer();
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(port, "127.0.0.1", () => resolve()));
  return server;
}


/**
 * A TCP proxy to `target` that can freeze: afterwards it keeps every connection open
 * and drops what either side sends, as a network partition does (a nats-server that
 * is killed refuses at once; one behind a partition never answers).
 */
async function freezableProxy(target: { host: string; port: number }): Promise<{ port: number; freeze(): void; close(): Promise<void> }> {
  let frozen = false;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = tcpConnect(target);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => sockets.delete(s));
    }
    client.on("data", (d) => frozen || upstream.write(d));
    upstream.on("data", (d) => frozen || client.write(d));
    client.on("end", () => frozen || upstream.end());
    upstream.on("end", () => frozen || client.end());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  return {
    port: (server.address() as { port: number }).port,
    freeze: () => {
      frozen = true;
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe("bounded stop", () => {
  // stopped: the nats-server is killed (connections refused); partitioned: it is behind
  // a proxy that stops passing anything (nothing answers, nothing is refused)
  for (const how of ["stopped", "partitioned"] as const) {
    it(`a stt serve whose supervisor is SIGKILLed while NATS is ${how} exits within SHUTDOWN_TIMEOUT_MS and frees its port`, async () => {
      const nats = await startPrivateNatsServer();
      const proxy = await freezableProxy({ host: "127.0.0.1", port: Number(new URL(nats.url).port) });
      const boundMs = 3000;
      // one `stt serve` with every service (test/supervise-layout.test.ts runs the layout of several)
      const supervisor = supervise(ownEnv({ NATS_URL: `nats://127.0.0.1:${proxy.port}`, STT_SERVICES: "all", STT_LAYOUT: "single", POCKETSPHINX_PROCESSES: "1", SHUTDOWN_TIMEOUT_MS: String(boundMs), PORT: "0" }));
      let pid = 0;
      try {
        const up = await supervisor.up();
        pid = up.pid;
        const port = up.port;
        expect(await health(port)).toBe(200);

        if (how === "stopped") await nats.stop("SIGKILL");
        else proxy.freeze();
        // the serve sees NATS gone (readiness names it) before its supervisor dies
        await waitFor(
          async () => {
            const res = await fetch(`http://127.0.0.1:${port}/readyz`, { headers: { connection: "close" } }).catch(() => undefined);
            const body = res ? ((await res.json().catch(() => ({}))) as { checks?: { nats?: { ok?: boolean } } }) : {};
            return res?.status === 503 && body.checks?.nats?.ok === false;
          },
          { timeoutMs: 60_000, what: "/readyz to report NATS down" },
        );

        supervisor.proc.kill("SIGKILL");
        const killedAt = Date.now();
        await waitFor(async () => gone(pid), { timeoutMs: 90_000, everyMs: 100, what: `stt serve ${pid} to exit after its supervisor was killed` });
        const tookMs = Date.now() - killedAt;
        // the bound is the behaviour: SHUTDOWN_TIMEOUT_MS plus a margin for a busy machine
        expect(tookMs).toBeLessThan(boundMs + 15_000);
        expect(await health(port)).toBe(0);
        console.log(`NATS ${how}: serve exited ${tookMs} ms after its supervisor's SIGKILL (bound ${boundMs} ms)`);
      } finally {
        if (supervisor.proc.exitCode === null && supervisor.proc.signalCode === null) supervisor.proc.kill("SIGKILL");
        // its own process group: not reached through the supervisor
        if (pid && !gone(pid)) process.kill(pid, "SIGKILL");
        await proxy.close();
        await nats.destroy();
      }
    });
  }
});
