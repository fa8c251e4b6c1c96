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
export async function updateLeaseEntry<T>(
  kv: KV,
  key: string,
  empty: () => T,
  change: (current: T) => T | null,
  { attempts = 25, known }: { attempts?: number; known?: KnownRevisions } = {},
): Promise<T | null> {
  for (let attempt = 0; attempt < attempts; attempt++) {
    if (attempt > 0) await casBackoff(attempt);
    // What this process wrote last, if it still holds: the write checks it (compare-and-set).
    // A key it never wrote is first tried as absent (create-if-absent): a new session's
    // entry then costs one write; an entry that exists fails the create and is read.
    const cached = attempt === 0 && known ? (known.get(key) ?? { revision: undefined, value: null }) : undefined;
    const entry = cached ? null : await kv.get(key);
    const revision = cached ? cached.revision : entry?.revision;
    const current: T = cached ? (cached.value === null ? empty() : (JSON.parse(cached.value) as T)) : entry && entry.operation === "PUT" && entry.length > 0 ? (entry.json() as T) : empty();
    const next = change(current);
    // a refusal is only as good as what it saw: judged on memory or a guess, read and judge again
    if (next === null && cached) continue;
    if (next === null) return null;
    const value = JSON.stringify(next);
    try {
      const written = revision !== undefined ? await kv.update(key, value, revision) : await kv.create(key, value);
      known?.set(key, { revision: written, value });
      return next;
    } catch (err) {
      known?.delete(key);
      // Another writer was first: read again. Anything else (NATS down: 503
      // nats_unavailable) is not contention and would not pass by looping.
      if (!isCasConflict(err)) throw err;
    }
  }
  throw new AppError("unavailable", "lease_store_unavailable", "Could not update a shared lease table (too much contention); retry shortly.", {
    headers: { "Retry-After": "1" },
  });
}

/**
 * The wait before compare-and-set attempt `attempt` (1, 2, …) after a lost race: a
 * random delay up to 2^attempt ms, at most 50 ms ("full jitter"), so writers that
 * collided spread out instead of colliding again in lockstep. 25 attempts wait about
 * 0.6 s in all on average.
 */
export function casBackoff(attempt: number): Promise<void> {
  const ceiling = Math.min(50, 2 ** attempt);
  return new Promise((resolve) => setTimeout(resolve, Math.random() * ceiling));
}

/**
 * Changes of one entry coalesced per process: a change arriving while a write of the
 * same entry is in flight waits and goes with every other waiting change in the next
 * write, so N concurrent callers cost about two compare-and-set writes instead of N
 * racing each other (200 upgrades of one key at once used to exhaust their attempts).
 * `write` applies a change with compare-and-set (it may run it several times, so
 * changes must be pure); each caller's change runs on the state its predecessors in
 * the batch left. A change that throws refuses only its caller; one returning null
 * leaves the state as it found it. A failed write fails the whole batch.
 */
export function createEntryBatcher<S>(write: (key: string, change: (state: S) => S | null) => Promise<unknown>) {
  interface Waiting {
    change: (state: S) => S | null;
    resolve: (value: S | null) => void;
    reject: (err: unknown) => void;
  }
  const queues = new Map<string, Waiting[]>();
  const running = new Set<string>();

  const run = async (key: string) => {
    running.add(key);
    try {
      for (let batch = queues.get(key); batch; batch = queues.get(key)) {
        queues.delete(key);
        const outcomes: ({ ok: true; value: S | null } | { ok: false; err: unknown })[] = [];
        try {
          await write(key, (state) => {
            let current = state;
            let changed = false;
            batch!.forEach((w, i) => {
              try {
                const next = w.change(current);
                outcomes[i] = { ok: true, value: next };
                if (next !== null) {
                  current = next;
                  changed = true;
                }
              } catch (err) {
                outcomes[i] = { ok: false, err };
              }
            });
            return changed ? current : null;
          });
          batch.forEach((w, i) => {
            const o = outcomes[i]!;
            if (o.ok) w.resolve(o.value);
            else w.reject(o.err);
          });
        } catch (err) {
          for (const w of batch) w.reject(err);
        }
      }
    } finally {
      running.delete(key);
    }
  };

  return function changeEntry(key: string, change: (state: S) => S | null): Promise<S | null> {
    return new Promise((resolve, reject) => {
      const queue = queues.get(key);
      if (queue) queue.push({ change, resolve, reject });
      else queues.set(key, [{ change, resolve, reject }]);
      if (!running.has(key)) void run(key);
    });
  };
}

/**
 * The revision and value this process last wrote per key, so the next change of an
 * entry nobody else touched meanwhile skips reading it: the write still names the
 * revision, and a stale one fails as a conflict and is read afresh. At most `max` keys.
 */
export class KnownRevisions {
  private readonly entries = new Map<string, { revision: number; value: string }>();
  constructor(private readonly max = 4096) {}
  get(key: string) {
    return this.entries.get(key);
  }
  set(key: string, entry: { revision: number; value: string }) {
    this.entries.delete(key);
    this.entries.set(key, entry);
    if (this.entries.size > this.max) this.entries.delete(this.entries.keys().next().value!);
  }
  delete(key: string) {
    this.entries.delete(key);
  }
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
