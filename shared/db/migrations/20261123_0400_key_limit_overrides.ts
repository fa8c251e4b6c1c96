import type { Kysely } from "kysely";

/** Per-key overrides of the plan's limits (KeyIssued `limits`), null for none. */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("api_keys").addColumn("limit_overrides", "jsonb").execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("api_keys").dropColumn("limit_overrides").execute();
}
