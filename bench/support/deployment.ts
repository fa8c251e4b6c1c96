import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { loadConfig } from "../../shared/config";
import { createDb, dropSchema } from "../../shared/db/index";
import { connectNats, destroyTopology } from "../../shared/nats";
import { serveCommand, waitForServer } from "./server";

type Env = Record<string, string | undefined>;

/**
 * A bench's own deployment on the machine's NATS and Postgres: a stream prefix, a schema,
 * a data directory and credentials of its own, so a bench never sees another's (or the
 * tests') state, and `destroy` leaves nothing behind.
 */
export class BenchDeployment {
  readonly id = randomBytes(4).toString("hex");
  readonly prefix: string;
  readonly schema: string;
  readonly dataDir: string;
  readonly adminToken = `admin-${randomBytes(8).toString("hex")}`;
  private readonly sessionTokenSecret = randomBytes(16).toString("hex");

  /** `tag` starts the prefix and the schema's name (`b` → prefix `b1a2b3c4d`, schema `b_1a2b3c4d`). */
  constructor(tag = "b") {
    this.prefix = `${tag}${this.id}`;
    this.schema = `${tag}_${this.id}`;
    this.dataDir = `/tmp/stt-bench-${tag}${this.id}`;
  }

  /** The variables that make a server part of this deployment (listening on a free port of 127.0.0.1), then `extra`. */
  env(extra: Env = {}): Record<string, string> {
    const own: Env = {
      HOST: "127.0.0.1",
      PORT: "0",
      LOG_LEVEL: "info",
      NATS_PREFIX: this.prefix,
      DATABASE_SCHEMA: this.schema,
      DATA_DIR: this.dataDir,
      GATEWAY_ADMIN_TOKEN: this.adminToken,
      GATEWAY_SESSION_TOKEN_SECRET: this.sessionTokenSecret,
      ...extra,
    };
    return Object.fromEntries(Object.entries(own).filter((e): e is [string, string] => e[1] !== undefined));
  }

  /**
   * Starts `stt serve` as bin/stt does (`nodeFlags` added to node's) with this process's
   * environment, then env(extra); resolves once it is up.
   */
  async serve(extra: Env = {}, nodeFlags: string[] = []): Promise<{ proc: ChildProcess; port: number; baseUrl: string }> {
    const proc = spawn(...serveCommand(nodeFlags), { env: { ...process.env, ...this.env(extra) }, stdio: ["ignore", "pipe", "pipe"] });
    const port = await waitForServer(proc);
    return { proc, port, baseUrl: `http://127.0.0.1:${port}` };
  }

  /** A new API key for `owner` on the pro plan; `fields` go into the request too (e.g. `limits`). */
  async issueKey(baseUrl: string, owner: string, fields: Record<string, unknown> = {}): Promise<string> {
    const res = await fetch(`${baseUrl}/v1/external-transcription/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${this.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ plan: "pro", owner_id: owner, ...fields }),
    });
    if (!res.ok) throw new Error(`issuing a key failed: ${res.status} ${await res.text()}`);
    return ((await res.json()) as { data: { key: string } }).data.key;
  }

  /** Removes the deployment's streams, schema and data directory (each best effort). */
  async destroy(): Promise<void> {
    const base = loadConfig(process.env);
    const nats = await connectNats({ url: base.nats.url, prefix: this.prefix, declare: false });
    await destroyTopology(nats).catch(() => undefined);
    await nats.close();
    const db = createDb({ ...base.db, schema: this.schema });
    await dropSchema(db, this.schema).catch(() => undefined);
    await db.destroy();
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}
