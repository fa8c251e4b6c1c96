import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig, type Config } from "../../shared/config";
import { createDb, dropSchema, type Db } from "../../shared/db/index";
import { createLogger } from "../../shared/logger";
import { connectNats, destroyTopology, type Nats } from "../../shared/nats";
import { startRuntime, type Runtime } from "../../services/stt/runtime";

/**
 * The whole service, in-process, against the real NATS and Postgres, isolated by a
 * random stream prefix, Postgres schema and data directory. Everything it creates
 * is removed by stop().
 */
export interface Stack {
  baseUrl: string;
  port: number;
  config: Config;
  runtime: Runtime;
  nats: Nats;
  db: Db;
  adminToken: string;
  sessionSecret: string;
  id: string;
  /** Issues a key through the admin route and returns its plaintext and id. */
  issueKey(plan?: string, ownerId?: string, extra?: Record<string, unknown>): Promise<{ key: string; id: string }>;
  /** Shorthand for fetch(baseUrl + path). */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  stop(): Promise<void>;
}

export function randomId(): string {
  return randomBytes(5).toString("hex");
}

export async function startStack(overrides: Record<string, string | undefined> = {}): Promise<Stack> {
  const id = randomId();
  const dataDir = mkdtempSync(join(tmpdir(), `stt-${id}-`));
  const adminToken = `admin-${randomId()}${randomId()}`;
  const sessionSecret = `secret-${randomId()}${randomId()}`;
  const config = loadConfig(process.env, {
    STT_SERVICES: "all",
    HOST: "127.0.0.1",
    PORT: "0",
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "error",
    NATS_PREFIX: `t${id}`,
    DATABASE_SCHEMA: `t_${id}`,
    DATABASE_POOL_MAX: "5",
    DATA_DIR: dataDir,
    GATEWAY_ADMIN_TOKEN: adminToken,
    GATEWAY_SESSION_TOKEN_SECRET: sessionSecret,
    JOB_ALLOW_PRIVATE_URLS: "true",
    // two streaming decoders per test stack (not the production default of all)
    RT_STREAM_DECODERS_WARM: "2",
    // the machine runs other test files' stacks: its busy cores are not this stack's sessions' (admission's own tests set it)
    RT_ADMIT_MAX_MACHINE_SHARE: "0",
    ...overrides,
  });
  const runtime = await startRuntime(config, createLogger(config.logLevel, { test: id }));
  const port = runtime.ctx.slots.port;
  if (!port) throw new Error("the stack did not bind a port");
  const baseUrl = `http://127.0.0.1:${port}`;
  const fetchPath = (path: string, init?: RequestInit) => fetch(baseUrl + path, init);

  return {
    baseUrl,
    port,
    config,
    runtime,
    nats: runtime.ctx.nats,
    db: runtime.ctx.db,
    adminToken,
    sessionSecret,
    id,
    fetch: fetchPath,
    async issueKey(plan = "free", ownerId = "default", extra = {}) {
      const res = await fetchPath("/v1/external-transcription/keys", {
        method: "POST",
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify({ plan, owner_id: ownerId, ...extra }),
      });
      const body = (await res.json()) as { ok: boolean; data: { key: string; id: string } };
      if (!body.ok) throw new Error(`issueKey failed: ${JSON.stringify(body)}`);
      return { key: body.data.key, id: body.data.id };
    },
    async stop() {
      await runtime.stop();
      const nats = await connectNats({ url: config.nats.url, prefix: config.nats.prefix, declare: false });
      await destroyTopology(nats);
      await nats.close();
      const db = createDb(config.db);
      await dropSchema(db, config.db.schema);
      await db.destroy();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
