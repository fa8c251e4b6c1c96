import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHmac } from "node:crypto";
import { redeemSessionToken, verifySessionToken } from "../domain/keys/auth";
import { startStack, type Stack } from "./support/stack";
import { spendTokensInLeases } from "../services/realtime-gateway/spent-tokens";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

const TOKEN_PATH = "/v1/audio/transcriptions/session-token";
const post = (headers: Record<string, string> = {}, path = TOKEN_PATH) => stack.fetch(path, { method: "POST", headers });
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

async function expectAuthError(res: Response, status: number, code: string) {
  expect(res.status).toBe(status);
  const body = await res.json();
  expect(body).toEqual({ error: { message: expect.any(String), type: expect.any(String), code, param: null } });
  return body;
}

describe("API key authentication (spec 5.1, 7.1)", () => {
  it("missing, malformed and unknown keys", async () => {
    await expectAuthError(await post(), 401, "missing_api_key");
    await expectAuthError(await post({ authorization: "" }), 401, "missing_api_key");
    await expectAuthError(await post({ authorization: "Basic abc" }), 401, "invalid_api_key");
    await expectAuthError(await post(bearer("sk-short")), 401, "invalid_api_key");
    await expectAuthError(await post(bearer("pk-0123456789abcdef")), 401, "invalid_api_key");
    const unknown = await expectAuthError(await post(bearer("sk-0123456789abcdefghijklmnop")), 401, "invalid_api_key");
    expect(unknown.error.type).toBe("authentication_error");
  });

  it("a freshly issued key works on the very next request", async () => {
    const { key } = await stack.issueKey();
    const res = await post(bearer(key));
    expect(res.status).toBe(200);
  });

  it("lifecycle: issue → use → revoke → revoked_api_key", async () => {
    const { key, id } = await stack.issueKey();
    expect((await post(bearer(key))).status).toBe(200);
    const del = await stack.fetch(`/v1/external-transcription/keys/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.adminToken}` } });
    expect(del.status).toBe(200);
    await expectAuthError(await post(bearer(key)), 401, "revoked_api_key");
  });

  it("expiry: a key past expiresAt fails with expired_api_key", async () => {
    // 8 s: room for the first request to be answered before it on a loaded machine
    const expiresAt = Date.now() + 8000;
    const { key } = await stack.issueKey("free", "default", { expires_at: new Date(expiresAt).toISOString() });
    expect((await post(bearer(key))).status).toBe(200);
    // used until it expires (every 1.5 s: the free plan allows 12 requests a minute)
    let res = await post(bearer(key));
    for (const deadline = expiresAt + 60_000; res.status === 200 && Date.now() < deadline; res = await post(bearer(key))) {
      await new Promise((r) => setTimeout(r, 1500));
    }
    // refused, and not before its expiry (the server's clock is this process's)
    expect(Date.now()).toBeGreaterThanOrEqual(expiresAt);
    await expectAuthError(res, 401, "expired_api_key");
    const list = await (await stack.fetch("/v1/external-transcription/keys", { headers: { authorization: `Bearer ${stack.adminToken}` } })).json();
    const listed = list.data.find((k: { keyPrefix: string }) => key.startsWith(k.keyPrefix));
    expect(listed.status).toBe("expired");
  });

  it("refuses keys placed in the URL", async () => {
    const { key } = await stack.issueKey();
    await expectAuthError(await post(bearer(key), `${TOKEN_PATH}?api_key=${key}`), 401, "invalid_api_key");
    const res = await stack.fetch(`/v1/audio/transcriptions/stream?access_token=${key}`);
    expect([401, 426]).toContain(res.status);
  });

  it("records lastUsedAt through a KeyUsed event", async () => {
    const { key, id } = await stack.issueKey();
    expect((await post(bearer(key))).status).toBe(200);
    let lastUsedAt: string | null = null;
    for (let i = 0; i < 50 && !lastUsedAt; i++) {
      const body = await (await stack.fetch(`/v1/external-transcription/keys/${id}`, { headers: { authorization: `Bearer ${stack.adminToken}` } })).json();
      lastUsedAt = body.data.lastUsedAt;
      if (!lastUsedAt) await new Promise((r) => setTimeout(r, 50));
    }
    expect(lastUsedAt).not.toBeNull();
  });
});

describe("session tokens (spec 4.5, 5.2)", () => {
  it("issues an rt_ token valid 60 s for the stream endpoint, bound to the key", async () => {
    const { key, id } = await stack.issueKey("pro", "tok-owner");
    const res = await post(bearer(key));
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    const body = await res.json();
    expect(body).toEqual({ token: expect.stringMatching(/^rt_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/), expires_in: 60, endpoint: "/v1/audio/transcriptions/stream" });
    expect(body.token).not.toContain(key);

    const principal = await verifySessionToken(stack.db, stack.sessionSecret, body.token, new Date());
    expect(principal).toMatchObject({ keyId: id, ownerId: "tok-owner", plan: "pro", via: "session_token" });

    // expired after 60 s
    await expect(verifySessionToken(stack.db, stack.sessionSecret, body.token, new Date(Date.now() + 61_000))).rejects.toMatchObject({ code: "invalid_session_token" });
    // tampered payload or signature, wrong secret
    const [payload, sig] = body.token.slice(3).split(".");
    const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload, "base64url").toString()), exp: 9_999_999_999 })).toString("base64url");
    await expect(verifySessionToken(stack.db, stack.sessionSecret, `rt_${forged}.${sig}`, new Date())).rejects.toMatchObject({ code: "invalid_session_token" });
    await expect(verifySessionToken(stack.db, stack.sessionSecret, `rt_${payload}.${sig.slice(0, -2)}xx`, new Date())).rejects.toMatchObject({ code: "invalid_session_token" });
    await expect(verifySessionToken(stack.db, "another-secret", body.token, new Date())).rejects.toMatchObject({ code: "invalid_session_token" });
    await expect(verifySessionToken(stack.db, stack.sessionSecret, "rt_garbage", new Date())).rejects.toMatchObject({ code: "invalid_session_token" });
    // correctly signed but without a usable jti (it names the token's spent marker), or not an object
    const sign = (claims: unknown) => {
      const p = Buffer.from(JSON.stringify(claims)).toString("base64url");
      return `rt_${p}.${createHmac("sha256", stack.sessionSecret).update(p).digest("base64url")}`;
    };
    const { jti: _jti, ...noJti } = JSON.parse(Buffer.from(payload, "base64url").toString());
    await expect(verifySessionToken(stack.db, stack.sessionSecret, sign(noJti), new Date())).rejects.toMatchObject({ code: "invalid_session_token" });
    await expect(verifySessionToken(stack.db, stack.sessionSecret, sign({ ...noJti, jti: "conn.x>" }), new Date())).rejects.toMatchObject({ code: "invalid_session_token" });
    await expect(verifySessionToken(stack.db, stack.sessionSecret, sign(null), new Date())).rejects.toMatchObject({ code: "invalid_session_token" });

    // redeeming spends it in the shared leases bucket; a spent token is refused with the same code
    const spend = spendTokensInLeases(stack.nats);
    await expect(redeemSessionToken(stack.db, stack.sessionSecret, body.token, new Date(), spend)).resolves.toMatchObject({ keyId: id });
    await expect(redeemSessionToken(stack.db, stack.sessionSecret, body.token, new Date(), spend)).rejects.toMatchObject({ code: "invalid_session_token", status: 401 });

    // a token of a key revoked since is refused
    await stack.fetch(`/v1/external-transcription/keys/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.adminToken}` } });
    await expect(verifySessionToken(stack.db, stack.sessionSecret, body.token, new Date())).rejects.toMatchObject({ code: "revoked_api_key" });
  });
});

describe("without a signing secret", () => {
  let bare: Stack;
  beforeAll(async () => {
    bare = await startStack({ GATEWAY_SESSION_TOKEN_SECRET: "" });
  });
  afterAll(async () => {
    await bare?.stop();
  });
  it("answers 503 token_issuer_unavailable", async () => {
    const { key } = await bare.issueKey();
    const res = await bare.fetch(TOKEN_PATH, { method: "POST", headers: bearer(key) });
    expect(res.status).toBe(503);
    const body = await res.json();
    expect(body.error.code).toBe("token_issuer_unavailable");
    await expect(verifySessionToken(bare.db, undefined, "rt_x.y", new Date())).rejects.toMatchObject({ code: "token_issuer_unavailable" });
  });
});
