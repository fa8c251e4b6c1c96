import { AppError } from "./errors";

/**
 * Failed authentication per source address, in fixed one-minute windows, kept in the
 * memory of each gateway process. A source that has failed `limit` times in the current
 * minute is refused 429 `too_many_auth_failures` (Retry-After: the seconds left in the
 * window) for any credential that would need a key-store lookup; keys the gateway
 * already holds in memory still pass, so clients sharing an address with a guesser
 * (behind one NAT or proxy) keep working while their keys are cached. Lookups in flight
 * count until they end (Retry-After 1 while only they fill the limit), so a source
 * never has more than `limit` failed lookups a minute, however many it sends at once.
 *
 * - What counts: a 401 for a presented credential (`invalid_api_key`, `revoked_api_key`,
 *   `expired_api_key`, `invalid_session_token`). A missing credential does not (nothing
 *   was guessed).
 * - Per process: with G gateways a source may fail G × limit times a minute in all. A
 *   shared counter would cost a KV round trip per failure, the very cost this bounds.
 * - Bounded memory: at most `maxSources` addresses are tracked; past that the oldest
 *   entry is dropped (a flood of distinct addresses forgets some, it never grows).
 */
export interface AuthThrottle {
  /** Throws 429 too_many_auth_failures when `source` is over its failures this window. */
  assertAllowed(source: string, nowMs: number): void;
  /**
   * Admits one key-store lookup for `source` (at most 4 at a time per source; the next
   * wait their turn), or rejects 429: the lookups in flight count as failures until
   * they end, so a burst of concurrent guesses cannot all pass the check before the
   * first one has failed. Pair with endLookup.
   */
  beginLookup(source: string, nowMs: number): Promise<void>;
  /** Ends a lookup begun with beginLookup; `failed`: it found no key (counted at once). */
  endLookup(source: string, failed: boolean, nowMs: number): void;
  /** Counts one failed authentication of `source`. */
  recordFailure(source: string, nowMs: number): void;
  /** Sources tracked now (metrics, tests). */
  size(): number;
}

export interface AuthThrottleOptions {
  /** Failures per source per window before refusing (at least 1). */
  limit: number;
  windowMs?: number;
  maxSources?: number;
}

const AUTH_FAILURE_CODES = new Set(["invalid_api_key", "revoked_api_key", "expired_api_key", "invalid_session_token"]);

/** A 401 for a presented credential: what the throttle counts. */
export function isAuthFailure(err: unknown): boolean {
  return err instanceof AppError && err.status === 401 && AUTH_FAILURE_CODES.has(err.code);
}

interface Window {
  start: number;
  failures: number;
  /** Lookups admitted and not yet ended (they outlive the window they began in). */
  inFlight: number;
  /** Lookups waiting for one in flight to end. */
  waiting: (() => void)[];
}

const LOOKUPS_IN_FLIGHT_PER_SOURCE = 4;

export function createAuthThrottle(options: AuthThrottleOptions): AuthThrottle {
  const limit = Math.max(1, Math.floor(options.limit));
  const windowMs = options.windowMs ?? 60_000;
  const maxSources = options.maxSources ?? 50_000;
  const sources = new Map<string, Window>();

  /** The source's window, started afresh once the previous one has ended. */
  const windowOf = (source: string, nowMs: number): Window => {
    const w = sources.get(source);
    if (w && nowMs - w.start < windowMs) return w;
    if (w) sources.delete(source);
    else if (sources.size >= maxSources) sources.delete(sources.keys().next().value!);
    const fresh = { start: nowMs, failures: 0, inFlight: w?.inFlight ?? 0, waiting: w?.waiting ?? [] };
    sources.set(source, fresh);
    return fresh;
  };

  const refuse = (w: Window, nowMs: number) => {
    // full: wait for the window to end; only lookups in flight: one of them may succeed
    const retryAfter = w.failures >= limit ? Math.max(1, Math.ceil((w.start + windowMs - nowMs) / 1000)) : 1;
    return new AppError(
      "rate_limited",
      "too_many_auth_failures",
      `Too many failed authentications from this address (at most ${limit} a minute); retry in ${retryAfter} s with a valid key.`,
      { headers: { "Retry-After": String(retryAfter) } },
    );
  };

  return {
    assertAllowed(source, nowMs) {
      const w = sources.get(source);
      if (!w) return;
      const current = windowOf(source, nowMs);
      if (current.failures + current.inFlight >= limit) throw refuse(current, nowMs);
    },
    async beginLookup(source, nowMs) {
      for (;;) {
        const w = windowOf(source, nowMs);
        if (w.failures >= limit) throw refuse(w, nowMs);
        if (w.inFlight < LOOKUPS_IN_FLIGHT_PER_SOURCE && w.failures + w.inFlight < limit) {
          w.inFlight++;
          return;
        }
        if (w.waiting.length >= limit) throw refuse(w, nowMs);
        await new Promise<void>((resolve) => w.waiting.push(resolve));
      }
    },
    endLookup(source, failed, nowMs) {
      const w = sources.get(source);
      if (!w) return;
      if (failed) windowOf(source, nowMs).failures++;
      if (w.inFlight > 0) w.inFlight--;
      // full: every waiter is refused now; otherwise the next one takes this place
      if (w.failures >= limit) for (const wake of w.waiting.splice(0)) wake();
      else w.waiting.shift()?.();
    },
    recordFailure(source, nowMs) {
      windowOf(source, nowMs).failures++;
    },
    size: () => sources.size,
  };
}

/**
 * The client's address: the TCP peer, or with `trustedProxyHops` proxies in front (each
 * appending the address it received from to X-Forwarded-For), the entry that many places
 * from the right, written by the outermost trusted proxy. Entries further left are the
 * client's own claims and are never used; a header shorter than the hops falls back to
 * its leftmost entry.
 */
export function clientAddress(peer: string, forwardedFor: string | undefined | null, trustedProxyHops: number): string {
  if (trustedProxyHops <= 0 || !forwardedFor) return peer || "unknown";
  const hops = forwardedFor
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (hops.length === 0) return peer || "unknown";
  return hops[Math.max(0, hops.length - trustedProxyHops)]!;
}
