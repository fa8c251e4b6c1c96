import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("projection_offsets")
    .addColumn("name", "text", (c) => c.primaryKey())
    .addColumn("last_seq", "bigint", (c) => c.notNull().defaultTo(0))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable("api_keys")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("owner_id", "text", (c) => c.notNull())
    .addColumn("key_hash", "text", (c) => c.notNull().unique())
    .addColumn("key_prefix", "text", (c) => c.notNull())
    .addColumn("last_four", "text", (c) => c.notNull())
    .addColumn("plan", "text", (c) => c.notNull())
    .addColumn("label", "text")
    .addColumn("expires_at", "timestamptz")
    .addColumn("revoked_at", "timestamptz")
    .addColumn("last_used_at", "timestamptz")
    .addColumn("created_at", "timestamptz", (c) => c.notNull())
    .execute();
  await db.schema.createIndex("api_keys_owner_idx").on("api_keys").column("owner_id").execute();

  await db.schema
    .createTable("usage_windows")
    .addColumn("key_id", "text", (c) => c.notNull())
    .addColumn("owner_id", "text", (c) => c.notNull())
    .addColumn("window_start", "timestamptz", (c) => c.notNull())
    .addColumn("audio_seconds", "double precision", (c) => c.notNull().defaultTo(0))
    .addColumn("requests", "bigint", (c) => c.notNull().defaultTo(0))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint("usage_windows_pk", ["key_id", "window_start"])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("usage_windows").ifExists().execute();
  await db.schema.dropTable("api_keys").ifExists().execute();
  await db.schema.dropTable("projection_offsets").ifExists().execute();
}
