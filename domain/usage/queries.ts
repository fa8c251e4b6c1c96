import { withStore, type Db } from "../../shared/db/index";
import { wholeSecondsLeft, windowStart } from "./quota";

/**
 * Reads of the usage_windows read model (projection.ts): per key and billing window,
 * following the usage stream by milliseconds (eventually consistent).
 */
const usedReads = new WeakMap<Db, Map<string, Promise<number>>>();

/**
 * Audio seconds used in the current window. Concurrent reads of one key and window
 * share one query: 200 upgrades of a key at once used to queue 200 queries on the pool,
 * and those past its connection timeout failed 503.
 */
export function usedAudioSeconds(db: Db, keyId: string, now: Date, windowSeconds: number): Promise<number> {
  let reads = usedReads.get(db);
  if (!reads) usedReads.set(db, (reads = new Map()));
  const k = `${keyId}:${windowStart(now, windowSeconds).getTime()}`;
  const pending = reads.get(k);
  if (pending) return pending;
  const read = readUsedAudioSeconds(db, keyId, now, windowSeconds).finally(() => reads.delete(k));
  reads.set(k, read);
  return read;
}

async function readUsedAudioSeconds(db: Db, keyId: string, now: Date, windowSeconds: number): Promise<number> {
  return withStore("auth_unavailable", async () => {
    const row = await db
      .selectFrom("usage_windows")
      .select("audio_seconds")
      .where("key_id", "=", keyId)
      .where("window_start", "=", windowStart(now, windowSeconds))
      .executeTakeFirst();
    return row ? Number(row.audio_seconds) : 0;
  });
}

/** Whole seconds left in the current billing window (never negative). */
export async function remainingAudioSeconds(db: Db, principal: { keyId: string; limits: { maxAudioSecondsPerWindow: number } }, now: Date, windowSeconds: number): Promise<number> {
  const used = await usedAudioSeconds(db, principal.keyId, now, windowSeconds);
  return wholeSecondsLeft(principal.limits.maxAudioSecondsPerWindow, used);
}

/** A key's audio seconds and requests in the window starting at `start` (zeros when none). */
export async function keyWindowUsage(db: Db, keyId: string, start: Date): Promise<{ audioSeconds: number; requests: number }> {
  const row = await withStore("store_unavailable", () =>
    db.selectFrom("usage_windows").select(["audio_seconds", "requests"]).where("key_id", "=", keyId).where("window_start", "=", start).executeTakeFirst(),
  );
  return { audioSeconds: row ? Number(row.audio_seconds) : 0, requests: row ? Number(row.requests) : 0 };
}

/** Each of an owner's keys (oldest first) with its audio seconds and requests in the window starting at `start`. */
export async function ownerWindowUsage(db: Db, ownerId: string, start: Date) {
  const rows = await withStore("store_unavailable", () =>
    db
      .selectFrom("api_keys")
      .leftJoin("usage_windows", (j) => j.onRef("usage_windows.key_id", "=", "api_keys.id").on("usage_windows.window_start", "=", start))
      .select(["api_keys.id as key_id", "api_keys.plan", "api_keys.limit_overrides", "usage_windows.audio_seconds", "usage_windows.requests"])
      .where("api_keys.owner_id", "=", ownerId)
      .orderBy("api_keys.created_at")
      .execute(),
  );
  return rows.map((r) => ({
    keyId: r.key_id as string,
    plan: r.plan as string,
    limitOverrides: r.limit_overrides,
    audioSeconds: Number(r.audio_seconds ?? 0),
    requests: Number(r.requests ?? 0),
  }));
}
