import type { KV } from "@nats-io/kv";
import { AppError } from "./errors";

/**
 * Read-modify-write of one JSON entry of a NATS KV bucket with compare-and-set on its
 * revision: `change` gets the current value (or `empty()`), returns the next one, or
 * null to leave the entry alone; it may throw to refuse. When another writer got there
 * first the entry is read again and `change` runs again, so `change` must be pure.
 * Used for every shared lease table here (connections, VAD partitions, utterance
 * slots): nats-server 2.9 has no per-key TTL, so expiries live in the values.
 */
export async function updateLeaseEntry<T>(kv: KV, key: string, empty: () => T, change: (current: T) => T | null, attempts = 25): Promise<T | null> {
  for (let attempt = 0; attempt < attempts; attempt++) {
    const entry = await kv.get(key);
    const current: T = entry && entry.operation === "PUT" && entry.length > 0 ? (entry.json() as T) : empty();
    const next = change(current);
    if (next === null) return null;
    const value = JSON.stringify(next);
    try {
      if (entry) await kv.update(key, value, entry.revision);
      else await kv.create(key, value);
      return next;
    } catch (err) {
      // Another writer was first: read again. Anything else (NATS down: 503
      // nats_unavailable) is not contention and would not pass by looping.
      if (!isCasConflict(err)) throw err;
    }
  }
  throw new AppError("unavailable", "lease_store_unavailable", "Could not update a shared lease table (too much contention); retry shortly.");
}

/** A compare-and-set write that lost: the entry's revision moved on (or it already exists). */
export function isCasConflict(err: unknown): boolean {
  const e = err as { message?: string; api_error?: { err_code?: number }; code?: unknown };
  return /wrong last sequence|key exists/i.test(e?.message ?? "") || e?.api_error?.err_code === 10071 || e?.code === 10071;
}

/** The entries of a lease table whose expiry (`exp`, epoch ms) is still ahead. */
export function liveLeases<L extends { exp: number }>(leases: Record<string, L>, nowMs: number): Record<string, L> {
  const out: Record<string, L> = {};
  for (const [id, l] of Object.entries(leases)) if (l.exp > nowMs) out[id] = l;
  return out;
}
