import { Kysely, Migrator, PostgresDialect, sql, type MigrationProvider } from "kysely";
import pg from "pg";
import type { Config } from "../config";
import { AppError } from "../errors";
import { migrations } from "./migrations/index";
import type { Database } from "./tables";

export type { Database } from "./tables";
export type Db = Kysely<Database>;

// bigint columns come back as strings by default; our counters fit in a double.
pg.types.setTypeParser(20, (v) => Number(v));

/**
 * Opens a pooled Kysely instance whose connections use `schema` as search_path, so
 * tests (and several deployments) can share one Postgres database.
 */
export function createDb(options: Config["db"]): Db {
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolMax,
    connectionTimeoutMillis: 2000,
    idleTimeoutMillis: 10_000,
    statement_timeout: options.statementTimeoutMs,
    options: `-c search_path=${options.schema}`,
  });
  // A broken connection must not crash the process (Postgres restarted or stopped):
  // the pool handles idle clients; a checked-out client has no listener of its own, and
  // its in-flight query already rejects with the same error, so the event is dropped.
  pool.on("error", () => undefined);
  pool.on("connect", (client) => client.on("error", () => undefined));
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}

const provider: MigrationProvider = { getMigrations: async () => migrations };

/**
 * Creates the schema if needed and runs every pending migration. Safe when several
 * processes start at once (`stt supervise` starts its children together): Postgres's
 * `create schema if not exists` can still fail with a unique violation when another
 * session creates it at the same moment, so that failure counts as success once the
 * schema is there; the migrations themselves run under kysely's lock (an advisory lock
 * on Postgres), one process after the other.
 */
export async function migrateToLatest(db: Db, schema: string): Promise<void> {
  await sql`create schema if not exists ${sql.id(schema)}`.execute(db).catch(async (err) => {
    const found = await sql<{ n: number }>`select 1 as n from pg_namespace where nspname = ${schema}`.execute(db);
    if (found.rows.length === 0) throw err;
  });
  const migrator = new Migrator({ db, provider, migrationTableSchema: schema });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === "Error");
  if (error || failed) {
    throw new Error(`migration ${failed?.migrationName ?? ""} failed: ${String((error as Error)?.message ?? error)}`);
  }
}

/** Drops a schema and everything in it: for tests cleaning up after themselves. */
export async function dropSchema(db: Db, schema: string): Promise<void> {
  await sql`drop schema if exists ${sql.id(schema)} cascade`.execute(db);
}

/** True when the error means Postgres could not be reached (vs. a query bug). */
function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (typeof e?.code === "string" && /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EPIPE|57P0[1-3]|08\d{3})$/.test(e.code)) {
    return true;
  }
  return /(timeout exceeded when trying to connect|Connection terminated|connect ECONNREFUSED|terminating connection)/i.test(e?.message ?? "");
}

/** Runs a read against the read models, mapping connection failures to `code`. */
export async function withStore<T>(code: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof AppError) throw err;
    if (isConnectionError(err)) {
      throw new AppError("unavailable", code, "the key store is unavailable; try again shortly", { cause: err });
    }
    throw err;
  }
}
