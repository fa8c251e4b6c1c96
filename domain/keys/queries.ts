import type { Selectable } from "kysely";
import { withStore, type Db } from "../../shared/db/index";
import type { ApiKeysTable } from "../../shared/db/tables";

/**
 * Reads of the api_keys read model (domain/keys/projection.ts). It follows the key
 * stream by milliseconds; the key cache (key-cache.ts) lays the live feed over it.
 */
export type KeyRecordRow = Selectable<ApiKeysTable>;

/** The columns authentication reads (also what key-cache.ts keeps). */
export type KeyRow = Pick<KeyRecordRow, "id" | "owner_id" | "key_hash" | "plan" | "expires_at" | "revoked_at" | "last_used_at" | "limit_overrides">;

const keyColumns = ["id", "owner_id", "key_hash", "plan", "expires_at", "revoked_at", "last_used_at", "limit_overrides"] as const;

/** The key of a hash, or undefined (503 `auth_unavailable` when Postgres is down). */
export function readKeyByHash(db: Db, hash: string): Promise<KeyRow | undefined> {
  return withStore("auth_unavailable", () => db.selectFrom("api_keys").select(keyColumns).where("key_hash", "=", hash).executeTakeFirst());
}

/** The key of an id for authentication (session tokens), or undefined (503 `auth_unavailable`). */
export function readKeyForAuth(db: Db, keyId: string): Promise<KeyRow | undefined> {
  return withStore("auth_unavailable", () => db.selectFrom("api_keys").select(keyColumns).where("id", "=", keyId).executeTakeFirst());
}

/** A key's whole row, or undefined (`store_unavailable` when Postgres is down). */
export function readKey(db: Db, keyId: string): Promise<KeyRecordRow | undefined> {
  return withStore("store_unavailable", () => db.selectFrom("api_keys").selectAll().where("id", "=", keyId).executeTakeFirst());
}

/** Every key, or one owner's, oldest first (`store_unavailable` when Postgres is down). */
export function listKeys(db: Db, ownerId?: string): Promise<KeyRecordRow[]> {
  return withStore("store_unavailable", () => {
    let q = db.selectFrom("api_keys").selectAll().orderBy("created_at", "asc").orderBy("id", "asc");
    if (ownerId) q = q.where("owner_id", "=", ownerId);
    return q.execute();
  });
}
