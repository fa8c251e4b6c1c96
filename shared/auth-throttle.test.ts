import { describe, expect, it } from "vitest";
import { clientAddress, createAuthThrottle, isAuthFailure } from "./auth-throttle";
import { AppError, unauthorized } from "./errors";

const refusal = (fn: () => void): AppError | undefined => {
  try {
    fn();
    return undefined;
  } catch (err) {
    return err as AppError;
  }
};

describe("auth throttle: failures per source", () => {
  it("refuses a source after `limit` failures in its window, with Retry-After to the window's end; other sources pass", async () => {
    const t = createAuthThrottle({ limit: 3, windowMs: 60_000 });
    for (let i = 0; i < 3; i++) {
      t.assertAllowed("a", 1000);
      t.recordFailure("a", 1000 + i);
    }
    const e = refusal(() => t.assertAllowed("a", 11_000));
    expect(e?.status).toBe(429);
    expect(e?.code).toBe("too_many_auth_failures");
    expect(e?.headers["Retry-After"]).toBe("50");
    await expect(t.beginLookup("a", 11_000)).rejects.toMatchObject({ code: "too_many_auth_failures" });
    expect(refusal(() => t.assertAllowed("b", 11_000))).toBeUndefined();
    // the next window starts clean
    expect(refusal(() => t.assertAllowed("a", 61_000))).toBeUndefined();
  });

  it("counts lookups in flight, so a concurrent burst gets at most `limit` lookups, at most 4 at a time; the rest wait or are refused", async () => {
    const t = createAuthThrottle({ limit: 6 });
    for (let i = 0; i < 4; i++) await t.beginLookup("a", 0);
    let fifthIn = false;
    const fifth = t.beginLookup("a", 0).then(() => (fifthIn = true));
    await new Promise((r) => setImmediate(r));
    expect(fifthIn).toBe(false); // four in flight: the fifth waits its turn
    t.endLookup("a", false, 0); // a key found: its place goes to the next
    await fifth;
    expect(fifthIn).toBe(true);
    // 4 in flight + 2 failures = the limit: the next is refused, Retry-After 1 (one in flight may succeed)
    t.endLookup("a", true, 0);
    t.endLookup("a", true, 0);
    await t.beginLookup("a", 0);
    await t.beginLookup("a", 0);
    const waiting = t.beginLookup("a", 0);
    t.endLookup("a", true, 0);
    t.endLookup("a", true, 0);
    // four failures + two in flight fill the limit: the waiter waits on (one may find a key)
    await new Promise((r) => setImmediate(r));
    t.endLookup("a", true, 0);
    t.endLookup("a", true, 0);
    // six failures: refused until the window ends
    await expect(waiting).rejects.toMatchObject({ code: "too_many_auth_failures", headers: { "Retry-After": "60" } });
  });

  it("refuses with Retry-After 1 once `limit` lookups already wait", async () => {
    const t = createAuthThrottle({ limit: 5 });
    for (let i = 0; i < 4; i++) await t.beginLookup("a", 0);
    const waiters = Array.from({ length: 5 }, () => t.beginLookup("a", 0).then(() => "in", (e) => e));
    await expect(t.beginLookup("a", 0)).rejects.toMatchObject({ headers: { "Retry-After": "1" } });
    for (let i = 0; i < 5; i++) {
      t.endLookup("a", false, 0); // a key found: the next waiter takes its place
      await new Promise((r) => setImmediate(r));
    }
    expect(await Promise.all(waiters)).toEqual(["in", "in", "in", "in", "in"]);
  });

  it("tracks at most maxSources addresses", () => {
    const t = createAuthThrottle({ limit: 1, maxSources: 100 });
    for (let i = 0; i < 1000; i++) t.recordFailure(`10.0.${i >> 8}.${i & 255}`, 0);
    expect(t.size()).toBe(100);
  });

  it("counts 401s for presented credentials, not a missing one nor other errors", () => {
    expect(isAuthFailure(unauthorized("invalid_api_key", "x"))).toBe(true);
    expect(isAuthFailure(unauthorized("revoked_api_key", "x"))).toBe(true);
    expect(isAuthFailure(unauthorized("invalid_session_token", "x"))).toBe(true);
    expect(isAuthFailure(unauthorized("missing_api_key", "x"))).toBe(false);
    expect(isAuthFailure(new AppError("unavailable", "auth_unavailable", "x"))).toBe(false);
  });
});

describe("client address", () => {
  it("is the peer unless proxies are trusted; then the entry that many hops from the right of X-Forwarded-For", () => {
    expect(clientAddress("10.0.0.1", "6.6.6.6", 0)).toBe("10.0.0.1");
    expect(clientAddress("10.0.0.1", "6.6.6.6, 203.0.113.9", 1)).toBe("203.0.113.9");
    expect(clientAddress("10.0.0.1", "6.6.6.6, 203.0.113.9, 10.0.0.2", 2)).toBe("203.0.113.9");
    expect(clientAddress("10.0.0.1", "203.0.113.9", 3)).toBe("203.0.113.9");
    expect(clientAddress("10.0.0.1", undefined, 1)).toBe("10.0.0.1");
    expect(clientAddress("", "", 1)).toBe("unknown");
  });
});
