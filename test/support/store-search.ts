import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { sql } from "kysely";
import type { Stack } from "./stack";

/** What a search found where (each finding names its place), and how much it read. */
export interface StoreSearch {
  found: string[];
  messages: number;
  columns: number;
  files: string[];
}

/**
 * Every store a test's stack wrote, searched for what must never be there (redacted
 * digits, a key): every message of every stream of the test's prefix, every text-like
 * column of its schema, every file of its object store, and the other texts given (the
 * logs, webhook bodies). `leaks` names what a text holds that it must not.
 */
export async function searchStores(stack: Stack, leaks: (text: string) => string[], texts: Record<string, readonly string[]> = {}): Promise<StoreSearch> {
  const found: string[] = [];
  const { jsm } = stack.nats;
  const prefix = stack.config.nats.prefix.toUpperCase();
  let messages = 0;
  for await (const info of jsm.streams.list()) {
    if (!info.config.name.startsWith(`${prefix}_`)) continue;
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const m = await jsm.streams.getMessage(info.config.name, { seq }).catch(() => null);
      if (!m) continue;
      messages++;
      for (const l of leaks(Buffer.from(m.data).toString("latin1"))) found.push(`${info.config.name}#${seq} ${m.subject}: ${l}`);
    }
  }
  const columns = await sql<{ table_name: string; column_name: string }>`
    select table_name, column_name from information_schema.columns
    where table_schema = ${stack.config.db.schema} and data_type in ('text', 'character varying', 'json', 'jsonb', 'bytea', 'ARRAY')`.execute(stack.db);
  for (const { table_name: t, column_name: c } of columns.rows) {
    const rows = await sql<{ v: string | null }>`select ${sql.ref(c)}::text as v from ${sql.table(`${stack.config.db.schema}.${t}`)}`.execute(stack.db);
    for (const r of rows.rows) for (const l of leaks(r.v ?? "")) found.push(`${t}.${c}: ${l}`);
  }
  const files = walk(stack.config.objects.dir);
  for (const f of files) for (const l of leaks(readFileSync(f).toString("latin1"))) found.push(`${f}: ${l}`);
  for (const [place, list] of Object.entries(texts)) for (const text of list) for (const l of leaks(text)) found.push(`${place}: ${l}`);
  return { found, messages, columns: columns.rows.length, files };
}

export const walk = (dir: string): string[] => readdirSync(dir).flatMap((n) => (statSync(join(dir, n)).isDirectory() ? walk(join(dir, n)) : [join(dir, n)]));
