import { AppError } from "./errors";
import { isCasConflict } from "./lease-entry";
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
 */
export async function consumeRate(nats: Nats, keyId: string, kind: "requests" | "connections", limit: number, now: Date): Promise<RateState> {
  const minute = Math.floor(now.getTime() / 60_000);
  const resetSeconds = Math.max(1, Math.ceil(((minute + 1) * 60_000 - now.getTime()) / 1000));
  const kv = await nats.kv("rate");
  const k = `${keyId}.${kind}.${minute}`;
  for (let attempt = 0; attempt < 20; attempt++) {
    const entry = await kv.get(k);
    // an unreadable value counts as 0 and is overwritten, so it cannot disable the limit
    const stored = entry && entry.length > 0 ? Number(entry.string()) : 0;
    const count = Number.isInteger(stored) && stored >= 0 ? stored : 0;
    if (count >= limit) {
      const state = { limit, remaining: 0, resetSeconds };
      throw new AppError("rate_limited", "rate_limit_exceeded", `Rate limit of ${limit} ${kind} per minute exceeded; retry in ${resetSeconds} s.`, {
        headers: { ...rateHeaders(state), "Retry-After": String(resetSeconds) },
      });
    }
    try {
      if (entry && entry.length > 0) await kv.update(k, String(count + 1), entry.revision);
      else if (entry) await kv.update(k, "1", entry.revision);
      else await kv.create(k, "1");
      return { limit, remaining: limit - count - 1, resetSeconds };
    } catch (err) {
      // lost the compare-and-set race to another gateway: read again (anything else,
      // such as NATS being down, is thrown: looping would not help)
      if (!isCasConflict(err)) throw err;
    }
  }
  throw new AppError("unavailable", "rate_limiter_unavailable", "Could not update the rate limiter; retry shortly.");
}

/** Units counted so far in the current minute for (keyId, kind), without counting one. */
export async function peekRate(nats: Nats, keyId: string, kind: "requests" | "connections", now: Date): Promise<number> {
  const minute = Math.floor(now.getTime() / 60_000);
  const entry = await (await nats.kv("rate")).get(`${keyId}.${kind}.${minute}`);
  const stored = entry && entry.length > 0 ? Number(entry.string()) : 0;
  return Number.isInteger(stored) && stored >= 0 ? stored : 0;
}
