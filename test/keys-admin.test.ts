import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sha256Hex } from "../domain/keys/auth";
import { startStack, type Stack } from "./support/stack";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

const admin = () => ({ authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" });
const KEYS = "/v1/external-transcription/keys";

describe("admin key routes (spec 4.8–4.11)", () => {
  it("refuses a missing or wrong admin token with admin_unauthorized in the admin envelope", async () => {
    for (const headers of [{}, { authorization: "Bearer wrong-token" }, { authorization: stack.adminToken }] as Record<string, string>[]) {
      for (const [method, path] of [["GET", KEYS], ["POST", KEYS], ["GET", `${KEYS}/key_x`], ["DELETE", `${KEYS}/key_x`]] as const) {
        const res = await stack.fetch(path, { method, headers });
        expect(res.status).toBe(401);
        const body = await res.json();
        expect(body).toEqual({ ok: false, error: { code: "admin_unauthorized", message: expect.stringMatching(/admin token is required/i), retryable: false } });
      }
    }
  });

  it("issues a key with defaults: sk- prefix, long, high entropy, returned once, only its hash stored", async () => {
    const res = await stack.fetch(KEYS, { method: "POST", headers: admin() });
    expect(res.status).toBe(201);
    const { ok, data } = await res.json();
    expect(ok).toBe(true);
    expect(data.key).toMatch(/^sk-[0-9A-Za-z]{43}$/);
    expect(data.key.length).toBeGreaterThanOrEqual(16);
    expect(data).toMatchObject({
      ownerId: "default",
      plan: "free",
      status: "active",
      label: null,
      expiresAt: null,
      revokedAt: null,
      lastUsedAt: null,
      keyPrefix: data.key.slice(0, 11),
      lastFour: data.key.slice(-4),
    });
    expect(data.id).toMatch(/^key_/);
    expect(new Date(data.createdAt).toISOString()).toBe(data.createdAt);
    expect(data.limits).toEqual({
      maxConcurrentConnections: 1,
      maxConcurrentUtterances: 2,
      maxConnectionsPerMinute: 6,
      maxRequestsPerMinute: 12,
      maxAudioSecondsPerRequest: 900,
      maxSessionSeconds: 900,
      maxAudioSecondsPerSession: 900,
      maxAudioSecondsPerWindow: 3600,
      idleTimeoutSeconds: 60,
    });

    // The read model holds the SHA-256 and never the plaintext.
    const row = await stack.db.selectFrom("api_keys").selectAll().where("id", "=", data.id).executeTakeFirstOrThrow();
    expect(row.key_hash).toBe(sha256Hex(data.key));
    expect(JSON.stringify(row)).not.toContain(data.key);
    // Nor does the event log.
    const msg = await stack.nats.jsm.streams.getMessage(stack.nats.topology.streams.keys.name, { last_by_subj: stack.nats.topology.subjects.keyEvent(data.id) });
    expect(msg!.string()).not.toContain(data.key);
    expect(msg!.string()).toContain(sha256Hex(data.key));

    // Later reads never show the plaintext again.
    const inspected = await (await stack.fetch(`${KEYS}/${data.id}`, { headers: admin() })).json();
    expect(inspected.data.key).toBeUndefined();
    expect(inspected.data.id).toBe(data.id);
  });

  it("issues distinct keys every time", async () => {
    const keys = await Promise.all([1, 2, 3, 4].map(() => stack.issueKey()));
    expect(new Set(keys.map((k) => k.key)).size).toBe(4);
  });

  it("honours owner, plan, label and expiry", async () => {
    const expires = new Date(Date.now() + 3_600_000).toISOString();
    const res = await stack.fetch(KEYS, { method: "POST", headers: admin(), body: JSON.stringify({ owner_id: "tenant-a", plan: "pro", label: "ci", expires_at: expires }) });
    expect(res.status).toBe(201);
    const { data } = await res.json();
    expect(data).toMatchObject({ ownerId: "tenant-a", plan: "pro", label: "ci", expiresAt: expires });
    expect(data.limits.maxConcurrentConnections).toBe(10);
  });

  it("rejects an unknown plan with invalid_plan and bad bodies with invalid_request", async () => {
    const bad = await stack.fetch(KEYS, { method: "POST", headers: admin(), body: JSON.stringify({ plan: "platinum" }) });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ ok: false, error: { code: "invalid_plan", message: expect.stringContaining("platinum"), retryable: false } });

    for (const body of ["{not json", JSON.stringify({ expires_at: "yesterday" }), JSON.stringify({ owner_id: "" }), JSON.stringify([1])]) {
      const res = await stack.fetch(KEYS, { method: "POST", headers: admin(), body });
      expect(res.status).toBe(400);
      const json = await res.json();
      expect(json.ok).toBe(false);
      expect(json.error.code).toBe("invalid_request");
      expect(json.error.retryable).toBe(false);
    }
    const past = await stack.fetch(KEYS, { method: "POST", headers: admin(), body: JSON.stringify({ expires_at: "2001-01-01T00:00:00Z" }) });
    expect(past.status).toBe(400);
  });

  it("lists keys, filtered by owner, without plaintext", async () => {
    const a = await stack.issueKey("free", "list-owner-a");
    const b = await stack.issueKey("free", "list-owner-b");
    const all = await (await stack.fetch(KEYS, { headers: admin() })).json();
    expect(all.ok).toBe(true);
    const ids = all.data.map((k: { id: string }) => k.id);
    expect(ids).toEqual(expect.arrayContaining([a.id, b.id]));
    expect(JSON.stringify(all)).not.toContain(a.key);

    const filtered = await (await stack.fetch(`${KEYS}?owner_id=list-owner-a`, { headers: admin() })).json();
    expect(filtered.data.map((k: { id: string }) => k.id)).toEqual([a.id]);
    expect(filtered.data[0]).not.toHaveProperty("key");
    const none = await (await stack.fetch(`${KEYS}?owner_id=nobody`, { headers: admin() })).json();
    expect(none).toEqual({ ok: true, data: [] });
  });

  it("inspects and revokes; unknown ids are key_not_found", async () => {
    const k = await stack.issueKey();
    const missing = await stack.fetch(`${KEYS}/key_doesnotexist`, { headers: admin() });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ ok: false, error: { code: "key_not_found", message: expect.any(String), retryable: false } });

    const del = await stack.fetch(`${KEYS}/${k.id}`, { method: "DELETE", headers: admin() });
    expect(del.status).toBe(200);
    const revoked = await del.json();
    expect(revoked.data).toMatchObject({ id: k.id, status: "revoked" });
    expect(Date.parse(revoked.data.revokedAt)).toBeGreaterThan(0);

    const again = await stack.fetch(`${KEYS}/${k.id}`, { method: "DELETE", headers: admin() });
    expect(again.status).toBe(200);
    expect((await again.json()).data.revokedAt).toBe(revoked.data.revokedAt);

    const delMissing = await stack.fetch(`${KEYS}/key_doesnotexist`, { method: "DELETE", headers: admin() });
    expect(delMissing.status).toBe(404);
    expect((await delMissing.json()).error.code).toBe("key_not_found");
  });

  it("answers unknown admin routes with not_found in the admin envelope", async () => {
    const res = await stack.fetch("/v1/external-transcription/nothing-here", { headers: admin() });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ ok: false, error: { code: "not_found", message: expect.any(String), retryable: false } });
  });

  it("serves the public plan catalog", async () => {
    const res = await stack.fetch("/v1/external-transcription/plans");
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.ok).toBe(true);
    const plans = Object.fromEntries(body.data.map((p: { plan: string; limits: unknown }) => [p.plan, p.limits]));
    expect(Object.keys(plans)).toEqual(expect.arrayContaining(["free", "pro"]));
    expect(plans.free.maxRequestsPerMinute).toBe(12);
    expect(plans.free.maxAudioSecondsPerWindow).toBe(3600);
  });
});
