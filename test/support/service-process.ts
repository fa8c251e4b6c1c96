import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../shared/config";
import { createDb, dropSchema } from "../../shared/db/index";
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
 * The environment that puts a child process on the stack's NATS prefix, Postgres schema
 * (a small pool), object store and data directory.
 */
export function stackChildEnv(stack: Stack): Record<string, string> {
  const c = stack.config;
  return {
    NATS_URL: c.nats.url,
    NATS_PREFIX: c.nats.prefix,
    DATABASE_URL: c.db.url,
    DATABASE_SCHEMA: c.db.schema,
    DATABASE_POOL_MAX: "2",
    OBJECT_STORE: "fs",
    OBJECT_STORE_DIR: c.objects.dir,
    DATA_DIR: c.dataDir,
  };
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

/** A whole service of its own (`startOwnService`): a child `stt serve`, a key, and its cleanup. */
export interface OwnService {
  service: ServiceProcess;
  baseUrl: string;
  /** A "pro" key issued through its admin route. */
  key: string;
  /** Its GATEWAY_ADMIN_TOKEN, to issue more keys (issueKeyAt). */
  adminToken: string;
  prefix: string;
  dataDir: string;
  /** Stops the process, drops its schema and removes its data directory. */
  stop(): Promise<void>;
}

/**
 * The whole service as a child `stt serve` on the given NATS (`env.NATS_URL`) with a
 * NATS prefix, Postgres schema, data directory and admin token of its own, for tests
 * that take its infrastructure away (nats-server restarts, cluster faults). `env` adds
 * to or overrides the defaults.
 */
export async function startOwnService(
  env: Record<string, string> & { NATS_URL: string },
  options: { owner: string; prefix?: string; timeoutMs?: number; onOutput?: (chunk: Buffer) => void },
): Promise<OwnService> {
  const prefix = options.prefix ?? `t${randomBytes(5).toString("hex")}`;
  const schema = `t_${randomBytes(5).toString("hex")}`;
  const adminToken = `admin-${randomBytes(8).toString("hex")}`;
  const dataDir = mkdtempSync(join(tmpdir(), `stt-${options.owner}-data-`));
  const dbConfig = loadConfig(process.env).db;
  const dropAll = async () => {
    const db = createDb({ ...dbConfig, schema });
    await dropSchema(db, schema).catch(() => undefined);
    await db.destroy();
    rmSync(dataDir, { recursive: true, force: true });
  };
  let service: ServiceProcess;
  try {
    service = await spawnService(
      {
        STT_SERVICES: "all",
        NATS_PREFIX: prefix,
        DATABASE_URL: dbConfig.url,
        DATABASE_SCHEMA: schema,
        DATABASE_POOL_MAX: "5",
        DATA_DIR: dataDir,
        GATEWAY_ADMIN_TOKEN: adminToken,
        GATEWAY_SESSION_TOKEN_SECRET: `secret-${randomBytes(8).toString("hex")}`,
        JOB_ALLOW_PRIVATE_URLS: "true",
        POCKETSPHINX_PROCESSES: "2",
        ...env,
      },
      { timeoutMs: options.timeoutMs, onOutput: options.onOutput },
    );
  } catch (err) {
    await dropAll();
    throw err;
  }
  const baseUrl = `http://127.0.0.1:${service.port}`;
  return {
    service,
    baseUrl,
    key: await issueKeyAt(baseUrl, adminToken, options.owner),
    adminToken,
    prefix,
    dataDir,
    stop: async () => {
      await service.stop();
      await dropAll();
    },
  };
}
