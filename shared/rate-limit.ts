import { AppError } from "./errors";
import type { KV } from "@nats-io/kv";
import { casBackoff, createEntryBatcher, isCasConflict } from "./lease-entry";
import type { Nats } from "./nats";

/**
 * Fixed one-minute windows per key, counted in the NATS KV bucket `rate` with
 * compare-and-set, so the limit holds across every gateway process sharing NATS.
 * Entries expire with the bucket's TTL (2 minutes).
 */
export interface RateState {
  limit: number;
  remaining: number;
  /** Seconds until the current window ends. */
  resetSeconds: number;
}

/**
 * OpenAI's names (what its SDKs and dashboards read: `x-ratelimit-reset-requests` is a
 * duration such as `12s`), plus the earlier `X-RateLimit-*` trio kept for clients that
 * read those.
 */
export function rateHeaders(state: RateState): Record<string, string> {
  return {
    "x-ratelimit-limit-requests": String(state.limit),
    "x-ratelimit-remaining-requests": String(state.remaining),
    "x-ratelimit-reset-requests": `${state.resetSeconds}s`,
    "X-RateLimit-Limit": String(state.limit),
    "X-RateLimit-Remaining": String(state.remaining),
    "X-RateLimit-Reset": String(state.resetSeconds),
  };
}

/**
 * Counts one unit against `limit` for (keyId, kind) in the current minute; throws
 * 429 `rate_limit_exceeded` (with Retry-After) when the window is full.
 *
 * Concurrent calls of one process for the same counter go in one compare-and-set
 * (createEntryBatcher): 200 upgrades of one key at once cost a few writes, where each
 * used to race the others and most ran out of attempts (503). Races with other
 * gateways retry with jitter; only a counter that still cannot be written after that is
 * 503 `rate_limiter_unavailable`, with Retry-After.
 */
export async function consumeRate(nats: Nats, keyId: string, kind: "requests" | "connections", limit: number, now: Date): Promise<RateState> {
  const minute = Math.floor(now.getTime() / 60_000);
  const resetSeconds = Math.max(1, Math.ceil(((minute + 1) * 60_000 - now.getTime()) / 1000));
  const count = await counterBatcher(nats, await nats.kv("rate"))(`${keyId}.${kind}.${minute}`, (count) => {
    if (count >= limit) {
      const state = { limit, remaining: 0, resetSeconds };
      throw new AppError("rate_limited", "rate_limit_exceeded", `Rate limit of ${limit} ${kind} per minute exceeded; retry in ${resetSeconds} s.`, {
        headers: { ...rateHeaders(state), "Retry-After": String(resetSeconds) },
      });
    }
    return count + 1;
  });
  return { limit, remaining: Math.max(0, limit - (count ?? limit)), resetSeconds };
}

const rateLimiterUnavailable = () =>
  new AppError("unavailable", "rate_limiter_unavailable", "Could not update the rate limiter; retry shortly.", { headers: { "Retry-After": "1" } });

/** A counter's value; an unreadable one counts as 0 (and is overwritten), so it cannot disable a limit. */
function counterValue(entry: { length: number; string(): string } | null): number {
  const stored = entry && entry.length > 0 ? Number(entry.string()) : 0;
  return Number.isInteger(stored) && stored >= 0 ? stored : 0;
}

/** One compare-and-set of a counter: `change` maps the count to the next (null: leave it). */
async function writeCounter(kv: KV, key: string, change: (count: number) => number | null): Promise<number | null> {
  for (let attempt = 0; attempt < 25; attempt++) {
    if (attempt > 0) await casBackoff(attempt);
    const entry = await kv.get(key);
    const next = change(counterValue(entry));
    if (next === null) return null;
    try {
      if (entry) await kv.update(key, String(next), entry.revision);
      else await kv.create(key, String(next));
      return next;
    } catch (err) {
      // lost the compare-and-set race to another gateway: read again (anything else,
      // such as NATS being down, is thrown: looping would not help)
      if (!isCasConflict(err)) throw err;
    }
  }
  throw rateLimiterUnavailable();
}

const counterBatchers = new WeakMap<Nats, ReturnType<typeof createEntryBatcher<number>>>();
function counterBatcher(nats: Nats, kv: KV) {
  let batcher = counterBatchers.get(nats);
  if (!batcher) {
    batcher = createEntryBatcher<number>((key, change) => writeCounter(kv, key, change));
    counterBatchers.set(nats, batcher);
  }
  return batcher;
}

/** Units counted so far in the current minute for (keyId, kind), without counting one. */
export async function peekRate(nats: Nats, keyId: string, kind: "requests" | "connections", now: Date): Promise<number> {
  const minute = Math.floor(now.getTime() / 60_000);
  const entry = await (await nats.kv("rate")).get(`${keyId}.${kind}.${minute}`);
  const stored = entry && entry.length > 0 ? Number(entry.string()) : 0;
  return Number.isInteger(stored) && stored >= 0 ? stored : 0;
}

/**
 * Requests per key and minute without a KV round trip per request: each process takes
 * the minute's units from the same `rate` counter in blocks (one compare-and-set per
 * block) and spends them locally.
 *
 * - Never more than `limit` in a minute across every gateway: the counter only grants
 *   what is left, and a process spends only what it was granted.
 * - The tolerance is the other way: units one gateway holds are not available to
 *   another, so with G gateways serving one key, up to (G − 1) × block units of its
 *   minute may be refused while held elsewhere. A block is ⌊limit / 20⌋ (5%), at least
 *   1 and at most 100; units unspent for `returnAfterMs` (default 1 s) go back to the
 *   counter, and a gateway that dies strands at most one block until the minute ends.
 *   At limits under 40 a block is one unit: every request is counted exactly as before.
 * - `remaining` in the headers is exact with one gateway; with several it counts the
 *   others' units as of this process's last take.
 */
export interface RequestLimiter {
  /** Counts one request; throws 429 `rate_limit_exceeded` (with Retry-After) when the minute is full. */
  consume(keyId: string, limit: number, now: Date): Promise<RateState>;
  /** Units this process holds unspent for the key in the current minute (counted in the bucket, not used). */
  unspent(keyId: string, now: Date): number;
  /** Gives the unspent units back. */
  stop(): Promise<void>;
}

export const rateBlockSize = (limit: number) => Math.max(1, Math.min(100, Math.floor(limit / 20)));

interface Allowance {
  minute: number;
  /** Units granted to this process by the counter. */
  taken: number;
  spent: number;
  /** The counter after this process's last compare-and-set: what every gateway took. */
  counterSeen: number;
  lastUse: number;
  refill?: Promise<number>;
}

export function createRequestLimiter(nats: Nats, options: { returnAfterMs?: number } = {}): RequestLimiter {
  const returnAfterMs = options.returnAfterMs ?? 1000;
  const allowances = new Map<string, Allowance>();
  const counterKey = (keyId: string, minute: number) => `${keyId}.requests.${minute}`;

  /** Takes up to a block from the counter; resolves the units granted (0: the minute is full). */
  const take = async (keyId: string, a: Allowance, limit: number): Promise<number> => {
    const kv = await nats.kv("rate");
    const k = counterKey(keyId, a.minute);
    for (let attempt = 0; attempt < 25; attempt++) {
      if (attempt > 0) await casBackoff(attempt);
      const entry = await kv.get(k);
      const stored = entry && entry.length > 0 ? Number(entry.string()) : 0;
      const count = Number.isInteger(stored) && stored >= 0 ? stored : 0;
      if (count >= limit) {
        a.counterSeen = count;
        return 0;
      }
      const grant = Math.min(rateBlockSize(limit), limit - count);
      try {
        if (entry) await kv.update(k, String(count + grant), entry.revision);
        else await kv.create(k, String(grant));
        a.taken += grant;
        a.counterSeen = count + grant;
        return grant;
      } catch (err) {
        if (!isCasConflict(err)) throw err;
      }
    }
    throw rateLimiterUnavailable();
  };

  /** Returns a key's unspent units to the counter (moved out of the allowance first, so none is spent twice). */
  const giveBack = async (keyId: string, a: Allowance, minute: number): Promise<void> => {
    const held = a.taken - a.spent;
    if (held <= 0 || a.refill) return;
    a.taken -= held;
    if (a.minute !== minute) return; // a past minute's units are moot
    const kv = await nats.kv("rate");
    const k = counterKey(keyId, a.minute);
    for (let attempt = 0; attempt < 25; attempt++) {
      if (attempt > 0) await casBackoff(attempt);
      const entry = await kv.get(k);
      if (!entry || entry.length === 0) return;
      const count = Number(entry.string());
      if (!Number.isInteger(count) || count <= 0) return;
      try {
        await kv.update(k, String(Math.max(0, count - held)), entry.revision);
        a.counterSeen = Math.max(0, count - held);
        return;
      } catch (err) {
        if (!isCasConflict(err)) throw err;
      }
    }
  };

  const sweep = setInterval(() => {
    const now = Date.now();
    const minute = Math.floor(now / 60_000);
    for (const [keyId, a] of allowances) {
      if (a.refill) continue;
      if (a.minute !== minute && a.taken - a.spent <= 0) allowances.delete(keyId);
      else if (now - a.lastUse >= returnAfterMs) void giveBack(keyId, a, minute).catch(() => undefined);
    }
  }, Math.max(50, returnAfterMs / 2));
  sweep.unref();

  return {
    async consume(keyId, limit, now) {
      const minute = Math.floor(now.getTime() / 60_000);
      const resetSeconds = Math.max(1, Math.ceil(((minute + 1) * 60_000 - now.getTime()) / 1000));
      let a = allowances.get(keyId);
      if (!a || a.minute !== minute) {
        a = { minute, taken: 0, spent: 0, counterSeen: 0, lastUse: 0 };
        allowances.set(keyId, a);
      }
      while (a.taken - a.spent <= 0) {
        const allowance = a;
        allowance.refill ??= take(keyId, allowance, limit).finally(() => (allowance.refill = undefined));
        if ((await allowance.refill) === 0 && allowance.taken - allowance.spent <= 0) {
          const state = { limit, remaining: 0, resetSeconds };
          throw new AppError("rate_limited", "rate_limit_exceeded", `Rate limit of ${limit} requests per minute exceeded; retry in ${resetSeconds} s.`, {
            headers: { ...rateHeaders(state), "Retry-After": String(resetSeconds) },
          });
        }
      }
      a.spent++;
      a.lastUse = Date.now();
      const used = a.counterSeen - a.taken + a.spent;
      return { limit, remaining: Math.max(0, limit - used), resetSeconds };
    },
    unspent(keyId, now) {
      const a = allowances.get(keyId);
      return a && a.minute === Math.floor(now.getTime() / 60_000) ? Math.max(0, a.taken - a.spent) : 0;
    },
    async stop() {
      clearInterval(sweep);
      const minute = Math.floor(Date.now() / 60_000);
      await Promise.all([...allowances].map(([keyId, a]) => giveBack(keyId, a, minute).catch(() => undefined)));
      allowances.clear();
    },
  };
}
