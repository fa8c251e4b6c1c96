import { spawn, type ChildProcess } from "node:child_process";
import { createConnection } from "node:net";
import { connectNats, destroyTopology, type Nats } from "../../shared/nats";
import { randomId } from "./stack";
import { freePort } from "./ports";

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

/** A nats-server of the test's own (own port and store), which the test may stop. */
export interface PrivateNatsServer {
  url: string;
  proc: ChildProcess;
  /** Sends `signal` (SIGKILL after 15 s) and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ port, host: "127.0.0.1" });
    s.once("connect", () => (s.destroy(), resolve(true)));
    s.once("error", () => resolve(false));
  });
}

/** Starts /usr/sbin/nats-server with JetStream on a free port and a store under `storeDir`; resolves once it accepts connections. */
export async function startPrivateNatsServer(storeDir: string): Promise<PrivateNatsServer> {
  const port = await freePort();
  const proc = spawn("/usr/sbin/nats-server", ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", storeDir], { stdio: "ignore" });
  const exited = new Promise<void>((r) => proc.once("exit", () => r()));
  const deadline = Date.now() + 15_000;
  while (!(await accepts(port))) {
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`nats-server on ${port} did not start`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    proc,
    stop: async (signal = "SIGTERM") => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const late = setTimeout(() => proc.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(late);
    },
  };
}
