import { spawn, type ChildProcess } from "node:child_process";
import type { Stack } from "./stack";

let processCount = 0;

export interface ServiceProcess {
  proc: ChildProcess;
  /** The HTTP port when the process runs a gateway, else null. */
  port: number | null;
  /** Everything the process printed so far. */
  output(): string;
  /** SIGKILL: no cleanup at all, as a crash. */
  kill(): Promise<void>;
}

/**
 * A second `stt serve` process running only `services`, on the stack's NATS prefix and
 * Postgres schema: another replica, as a deployment would run it. Resolves once it
 * logs "stt is up".
 */
export function startServiceProcess(stack: Stack, services: string, env: Record<string, string> = {}): Promise<ServiceProcess> {
  const proc = spawn(process.execPath, ["--import", "tsx", "services/stt/main.ts", "serve"], {
    cwd: process.cwd(),
    env: {
      ...process.env,
      STT_SERVICES: services,
      HOST: "127.0.0.1",
      PORT: "0",
      LOG_LEVEL: "info",
      NATS_URL: stack.config.nats.url,
      NATS_PREFIX: stack.config.nats.prefix,
      DATABASE_URL: stack.config.db.url,
      DATABASE_SCHEMA: stack.config.db.schema,
      GATEWAY_SESSION_TOKEN_SECRET: stack.sessionSecret,
      DATA_DIR: `${stack.runtime.ctx.config.dataDir}/${services.replace(/[^a-z-]/g, "_")}-${processCount++}`,
      RT_STREAM_DECODERS_WARM: "2",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  const exited = new Promise<void>((r) => proc.once("exit", () => r()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${services} process did not start:\n${log}`)), 60_000);
    const onData = (chunk: Buffer) => {
      log += chunk.toString();
      const up = /[^\n]*"msg":"stt is up"[^\n]*/.exec(log);
      if (!up) return;
      clearTimeout(timer);
      const port = /"port":(\d+)/.exec(up[0]);
      resolve({
        proc,
        port: port ? Number(port[1]) : null,
        output: () => log,
        kill: async () => {
          if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
          await exited;
        },
      });
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    proc.on("exit", (code) => reject(new Error(`${services} process exited ${code}:\n${log}`)));
  });
}
