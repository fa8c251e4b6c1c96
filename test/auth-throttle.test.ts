import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey, newKeyId } from "../domain/keys/auth";
import { startStack, type Stack } from "./support/stack";
import { refusal, wsUrl } from "./support/realtime-support";

/**
 * Failed authentication is throttled per client address and unknown keys are answered
 * from memory for a short TTL (docs/keys-and-auth.md, "Failed authentication"). The
 * stack trusts one proxy hop, so each test speaks for its own client address through
 * X-Forwarded-For.
 */
const FAILURES_PER_MINUTE = 30;
const NEGATIVE_TTL_MS = 3000;
let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ TRUSTED_PROXY_HOPS: "1", KEY_NEGATIVE_CACHE_TTL_MS: String(NEGATIVE_TTL_MS), AUTH_FAILURES_PER_MINUTE: String(FAILURES_PER_MINUTE) });
});
afterAll(async () => {
  await stack?.stop();
});

const usage = (key: string, from: string) => stack.fetch("/v1/usage", { headers: { authorization: `Bearer ${key}`, "x-forwarded-for": from } });
const codeOf = async (res: Response) => ((await res.json()) as { error: { code: string } }).error.code;

describe("failed-authentication throttling per address", () => {
  it("a burst of 200 unknown keys from one address gets at most 30 lookups (401); the rest are 429 with Retry-After", async () => {
    const from = "203.0.113.10";
    const { key: cachedKey } = await stack.issueKey("pro", "throttle");
    expect((await usage(cachedKey, from)).status).toBe(200); // now held in memory

    const answers = await Promise.all(Array.from({ length: 200 }, () => usage(generateApiKey().key, from)));
    const unauthorized = answers.filter((r) => r.status === 401);
    const throttled = answers.filter((r) => r.status === 429);
    // a lookup the busy test machine's pool of 5 could not serve in time is 503 with Retry-After
    const storeBusy = answers.filter((r) => r.status === 503);
    for (const r of storeBusy) {
      expect(await codeOf(r)).toBe("auth_unavailable");
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    }
    const others = await Promise.all(answers.filter((r) => ![401, 429, 503].includes(r.status)).map(async (r) => `${r.status} ${await r.text()}`));
    expect(others).toEqual([]);
    expect(throttled.length).toBeGreaterThanOrEqual(200 - FAILURES_PER_MINUTE - storeBusy.length);
    expect(unauthorized.length).toBeGreaterThan(0);
    expect(unauthorized.length).toBeLessThanOrEqual(FAILURES_PER_MINUTE);
    for (const r of throttled) {
      expect(await codeOf(r)).toBe("too_many_auth_failures");
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    }
    for (const r of unauthorized) expect(await codeOf(r)).toBe("invalid_api_key");

    // sequentially now: every further guess is refused before any lookup, to the window's end
    const next = await usage(generateApiKey().key, from);
    expect(next.status).toBe(429);
    expect(await codeOf(next)).toBe("too_many_auth_failures");
    expect(Number(next.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(Number(next.headers.get("retry-after"))).toBeLessThanOrEqual(60);

    // the same address's key held in memory still works; one not yet read waits too
    expect((await usage(cachedKey, from)).status).toBe(200);
    const { key: unseen } = await stack.issueKey("pro", "throttle");
    expect((await usage(unseen, from)).status).toBe(429);
    // another address is not affected
    const other = await usage(generateApiKey().key, "198.51.100.20");
    expect(other.status).toBe(401);
    expect((await usage(unseen, "198.51.100.20")).status).toBe(200);

    // the WebSocket upgrade shares the count (same gateway process, same address)
    const ws = await refusal(wsUrl(stack.baseUrl), { authorization: `Bearer ${generateApiKey().key}`, "x-forwarded-for": from });
    expect(ws.status).toBe(429);
    expect(ws.body.error.code).toBe("too_many_auth_failures");
    expect(Number(ws.headers["retry-after"])).toBeGreaterThanOrEqual(1);
  });
});

describe("unknown keys are answered from memory briefly", () => {
  it("an unknown key is not looked up again within KEY_NEGATIVE_CACHE_TTL_MS, and a KeyIssued on the feed ends that at once", async () => {
    const from = "203.0.113.30";
    // A key that does not exist yet: 401 (one lookup), then a row written straight into
    // the read model (no event) is not seen until the TTL: proof there was no lookup.
    const handMade = generateApiKey();
    const first = await usage(handMade.key, from);
    expect(first.status).toBe(401);
    const readAt = performance.now();
    const { id: template } = await stack.issueKey("pro", "negative");
    const row = await stack.db.selectFrom("api_keys").selectAll().where("id", "=", template).executeTakeFirstOrThrow();
    await stack.db
      .insertInto("api_keys")
      .values({ ...row, id: newKeyId(), key_hash: handMade.keyHash, key_prefix: handMade.keyPrefix, last_four: handMade.lastFour, limit_overrides: null })
      .execute();
    const cached = await usage(handMade.key, from);
    if (performance.now() - readAt < NEGATIVE_TTL_MS) expect(cached.status).toBe(401);
    let accepted = false;
    const deadline = Date.now() + 30_000;
    while (!accepted && Date.now() < deadline) {
      accepted = (await usage(handMade.key, from)).status === 200;
      if (!accepted) await new Promise((r) => setTimeout(r, 200));
    }
    expect(accepted).toBe(true);
    expect(performance.now() - readAt).toBeGreaterThanOrEqual(NEGATIVE_TTL_MS);

    // Issued through the key stream: the KeyIssued event drops the "unknown" entry, so
    // the key works as soon as the projection has its row, well inside the TTL.
    const issued = generateApiKey();
    expect((await usage(issued.key, from)).status).toBe(401);
    const keyId = newKeyId();
    const now = new Date().toISOString();
    const issuedAt = performance.now();
    await stack.runtime.ctx.keys.issue({
      keyId,
      ownerId: "negative",
      keyHash: issued.keyHash,
      keyPrefix: issued.keyPrefix,
      lastFour: issued.lastFour,
      plan: "pro",
      label: null,
      expiresAt: null,
      now,
    });
    let worked = false;
    while (!worked && performance.now() - issuedAt < 30_000) {
      worked = (await usage(issued.key, from)).status === 200;
      if (!worked) await new Promise((r) => setTimeout(r, 50));
    }
    expect(worked).toBe(true);
    expect(performance.now() - issuedAt).toBeLessThan(NEGATIVE_TTL_MS);
  });
});
