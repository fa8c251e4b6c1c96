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
  /** SIGTERM (a clean stop), SIGKILL after 20 s. */
  stop(): Promise<void>;
}

/**
 * A second `stt serve` process running only `services`, on the stack's NATS prefix and
 * Postgres schema: another replica, as a deployment would run it. Resolves once it
 * logs "stt is up".
 */
export function startServiceProcess(stack: Stack, services: string, env: Record<string, string> = {}): Promise<ServiceProcess> {
  return spawnService({
    STT_SERVICES: services,
    NATS_URL: stack.config.nats.url,
    NATS_PREFIX: stack.config.nats.prefix,
    DATABASE_URL: stack.config.db.url,
    DATABASE_SCHEMA: stack.config.db.schema,
    GATEWAY_SESSION_TOKEN_SECRET: stack.sessionSecret,
    DATA_DIR: `${stack.runtime.ctx.config.dataDir}/${services.replace(/[^a-z-]/g, "_")}-${processCount++}`,
    RT_STREAM_DECODERS_WARM: "2",
    ...env,
  });
}

/**
 * `stt serve` as a child process with `env` over this process's environment (on
 * 127.0.0.1, a free port, info logs); resolves once it logs "stt is up", rejects with
 * its output if it exits or takes longer than `timeoutMs`. `onOutput` sees everything
 * it prints as it comes.
 */
export function spawnService(env: Record<string, string>, options: { timeoutMs?: number; onOutput?: (chunk: Buffer) => void } = {}): Promise<ServiceProcess> {
  const proc = spawn(process.execPath, ["--import", "tsx", "services/stt/main.ts", "serve"], {
    cwd: process.cwd(),
    env: { ...process.env, HOST: "127.0.0.1", PORT: "0", LOG_LEVEL: "info", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  const exited = new Promise<void>((r) => proc.once("exit", () => r()));
  const services = env.STT_SERVICES ?? "all";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${services} process did not start:\n${log}`)), options.timeoutMs ?? 60_000);
    const onData = (chunk: Buffer) => {
      log += chunk.toString();
      options.onOutput?.(chunk);
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
        stop: async () => {
          if (proc.exitCode !== null || proc.signalCode !== null) return;
          proc.kill("SIGTERM");
          const late = setTimeout(() => proc.kill("SIGKILL"), 20_000);
          await exited;
          clearTimeout(late);
        },
      });
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    proc.on("exit", (code) => reject(new Error(`${services} process exited ${code}:\n${log}`)));
  });
}

/** A key of `plan` for `ownerId`, issued through the admin route of the service at `baseUrl`. */
export async function issueKeyAt(baseUrl: string, adminToken: string, ownerId: string, plan = "pro"): Promise<string> {
  const res = await fetch(`${baseUrl}/v1/external-transcription/keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ plan, owner_id: ownerId }),
  });
  return ((await res.json()) as { data: { key: string } }).data.key;
}
