import { sql, type Kysely } from "kysely";

/**
 * The batch-jobs read model. `state` is the job aggregate folded by the projection
 * (domain/jobs/projection.ts); `status`, `steps` and `error` are the poll
 * view's columns derived from it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("jobs")
    .addColumn("workflow_id", "text", (c) => c.primaryKey())
    .addColumn("request_id", "text", (c) => c.notNull())
    .addColumn("owner_id", "text", (c) => c.notNull())
    .addColumn("key_id", "text", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("steps", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn("error", "jsonb")
    .addColumn("review", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("state", "jsonb", (c) => c.notNull())
    .addColumn("last_seq", "bigint", (c) => c.notNull().defaultTo(0))
    .addColumn("created_at", "timestamptz", (c) => c.notNull())
    .addColumn("updated_at", "timestamptz", (c) => c.notNull())
    .execute();
  await db.schema.createIndex("jobs_owner_idx").on("jobs").columns(["owner_id", "created_at"]).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("jobs").ifExists().execute();
}
