import { sql, type Kysely } from "kysely";

/**
 * Events a projection could not apply (Postgres refused the rows, or the event did not
 * parse) and stepped over, one row per projection and stream sequence
 * (shared/projection.ts). `stt rebuild <projection>` clears and re-records its rows.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("projection_dead_letters")
    .addColumn("projection", "text", (c) => c.notNull())
    .addColumn("seq", "bigint", (c) => c.notNull())
    .addColumn("subject", "text", (c) => c.notNull())
    .addColumn("error", "text", (c) => c.notNull())
    .addColumn("recorded_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint("projection_dead_letters_pk", ["projection", "seq"])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("projection_dead_letters").ifExists().execute();
}
