import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectNats, destroyTopology, type Nats } from "../../shared/nats";
import { freePort } from "./ports";
import { randomId } from "./stack";

/** A NATS adapter on its own random prefix; destroy() deletes its streams and buckets. */
export async function isolatedNats(): Promise<Nats & { destroy(): Promise<void> }> {
  const nats = await connectNats({ url: process.env.NATS_URL ?? "nats://127.0.0.1:4222", prefix: `t${randomId()}` });
  return Object.assign(nats, {
    destroy: async () => {
      await destroyTopology(nats);
      await nats.close();
    },
  });
}

/** A nats-server of a test's own (own port and store directory), which the test may stop and start again. */
export interface PrivateNatsServer {
  url: string;
  port: number;
  /** Stops the server (SIGKILL after 15 s if the signal did not end it). */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port and store. */
  restart(): Promise<void>;
  /** Stops it and removes its store. */
  destroy(): Promise<void>;
}

const NATS_SERVER = "/usr/sbin/nats-server";

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ port, host: "127.0.0.1" });
    s.once("connect", () => (s.destroy(), resolve(true)));
    s.once("error", () => resolve(false));
  });
}

/** Starts a JetStream nats-server on a free port with a fresh store; destroy() in afterAll. */
export async function startPrivateNatsServer(): Promise<PrivateNatsServer> {
  const storeDir = mkdtempSync(join(tmpdir(), "stt-private-nats-"));
  const port = await freePort();
  let proc: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();
  const start = async () => {
    const p = spawn(NATS_SERVER, ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", storeDir], { stdio: "ignore" });
    proc = p;
    exited = new Promise<void>((r) => p.once("exit", () => r()));
    const deadline = Date.now() + 10_000;
    while (!(await accepts(port))) {
      if (Date.now() > deadline) throw new Error(`nats-server did not listen on ${port} within 10 s`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const stop = async (signal: NodeJS.Signals = "SIGTERM") => {
    const p = proc;
    if (!p) return;
    proc = null;
    if (p.exitCode === null && p.signalCode === null) p.kill(signal);
    const timer = setTimeout(() => p.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(timer);
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop,
    restart: async () => {
      await stop();
      await start();
    },
    destroy: async () => {
      await stop("SIGKILL");
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
