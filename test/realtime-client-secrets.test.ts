import OpenAI from "openai";
import WebSocket from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { issueClientSecret, verifyClientSecret } from "../domain/keys/client-secret";
import { refusal, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * Client secrets (`ek_…`, issue 33): issued with the unmodified openai SDK through both
 * OpenAI endpoints, then used on the native door as Bearer and as the browser
 * subprotocol, several times each (they are not single use); the refusals are the
 * documented 401s.
 */
let stack: Stack;
let key: string;
let keyId: string;
beforeAll(async () => {
  stack = await startStack();
  ({ key, id: keyId } = await stack.issueKey("pro", "ek-owner"));
});
afterAll(async () => {
  await stack?.stop();
});

const sdk = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${stack.baseUrl}/v1`, maxRetries: 0 });

/** Opens the native door, waits for session.created, closes; resolves with the selected protocol. */
function openNative(options: { headers?: Record<string, string>; protocols?: string[] }): Promise<string> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl(stack.baseUrl), options.protocols ?? [], { headers: options.headers ?? {} });
    ws.on("unexpected-response", (_req, res) => reject(new Error(`upgrade refused ${res.statusCode}`)));
    ws.on("error", reject);
    ws.on("message", (data) => {
      if (JSON.parse(data.toString()).type !== "session.created") return;
      const protocol = ws.protocol;
      ws.close(1000);
      ws.on("close", () => resolve(protocol));
    });
  });
}

async function expect401(res: Response | { status: number; body: any }, code: string) {
  const body = res instanceof Response ? await res.json() : res.body;
  expect(res.status).toBe(401);
  expect(body).toEqual({ error: { message: expect.any(String), type: "authentication_error", code, ...(res instanceof Response ? { param: null } : {}) } });
}

describe("issuing client secrets (OpenAI GA and beta endpoints)", () => {
  it("client.realtime.clientSecrets.create: the GA shape, the session carried in the secret", async () => {
    const session = {
      type: "transcription" as const,
      audio: { input: { format: { type: "audio/pcm" as const, rate: 24000 as const }, transcription: { model: "whisper-1", language: "en", prompt: "names" }, turn_detection: null } },
    };
    const before = Math.floor(Date.now() / 1000);
    const secret = await sdk(key).realtime.clientSecrets.create({ expires_after: { anchor: "created_at", seconds: 120 }, session });
    expect(secret.value).toMatch(/^ek_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    expect(secret.value).not.toContain(key);
    expect(secret.expires_at).toBeGreaterThanOrEqual(before + 120);
    expect(secret.expires_at).toBeLessThanOrEqual(before + 122);
    expect(secret.session).toEqual({
      id: expect.stringMatching(/^sess_/),
      object: "realtime.transcription_session",
      type: "transcription",
      expires_at: secret.expires_at,
      audio: { input: { format: { type: "audio/pcm", rate: 24000 }, transcription: { model: "whisper-1", language: "en", prompt: "names" }, noise_reduction: null, turn_detection: null } },
      include: null,
    });
    // what the door applies: the validated configuration, on the Principal and the Admission
    const principal = await verifyClientSecret(stack.db, stack.sessionSecret, secret.value, new Date());
    expect(principal).toMatchObject({ keyId, ownerId: "ek-owner", plan: "pro", via: "client_secret", presetSession: session });

    // defaults: 600 s, the service's server VAD
    const plain = await sdk(key).realtime.clientSecrets.create({});
    expect(plain.expires_at - Math.floor(Date.now() / 1000)).toBeGreaterThan(590);
    expect(plain.session).toMatchObject({ type: "transcription", audio: { input: { turn_detection: { type: "server_vad" } } } });
    expect((await verifyClientSecret(stack.db, stack.sessionSecret, plain.value, new Date())).presetSession).toBeUndefined();
  });

  it("client.beta.realtime.transcriptionSessions.create: the beta shape", async () => {
    const created = await sdk(key).beta.realtime.transcriptionSessions.create({
      input_audio_format: "g711_ulaw",
      input_audio_transcription: { model: "gpt-4o-mini-transcribe", language: "de" },
      turn_detection: { type: "server_vad", threshold: 0.6, silence_duration_ms: 400 },
      client_secret: { expires_at: { anchor: "created_at", seconds: 60 } },
    });
    expect(created).toMatchObject({
      id: expect.stringMatching(/^sess_/),
      object: "realtime.transcription_session",
      input_audio_format: "g711_ulaw",
      input_audio_transcription: { model: "gpt-4o-mini-transcribe", language: "de" },
      input_audio_noise_reduction: null,
      turn_detection: { type: "server_vad", threshold: 0.6, silence_duration_ms: 400 },
      modalities: ["text"],
      client_secret: { value: expect.stringMatching(/^ek_/), expires_at: expect.any(Number) },
    });
    expect(created.client_secret.expires_at - Math.floor(Date.now() / 1000)).toBeLessThanOrEqual(60);
    // carried in GA shape, whichever endpoint issued it
    const principal = await verifyClientSecret(stack.db, stack.sessionSecret, created.client_secret.value, new Date());
    expect(principal.presetSession).toEqual({
      type: "transcription",
      audio: { input: { format: { type: "audio/pcmu" }, transcription: { model: "gpt-4o-mini-transcribe", language: "de" }, turn_detection: { type: "server_vad", threshold: 0.6, silence_duration_ms: 400 } } },
    });
  });

  it("bad bodies answer the error envelope with param; an empty body means the defaults", async () => {
    const post = (path: string, body: string) => stack.fetch(path, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });
    for (const [path, body, param] of [
      ["/v1/realtime/client_secrets", { expires_after: { seconds: 5 } }, "expires_after.seconds"],
      ["/v1/realtime/client_secrets", { expires_after: { seconds: 7201 } }, "expires_after.seconds"],
      ["/v1/realtime/client_secrets", { session: { type: "realtime" } }, "session.type"],
      ["/v1/realtime/client_secrets", { session: { type: "transcription", audio: { input: { turn_detection: { type: "server_vad", threshold: 2 } } } } }, "session.audio.input.turn_detection.threshold"],
      ["/v1/realtime/transcription_sessions", { input_audio_format: "mp3" }, "input_audio_format"],
      ["/v1/realtime/transcription_sessions", { client_secret: { expires_at: { seconds: 9 } } }, "client_secret.expires_at.seconds"],
    ] as const) {
      const res = await post(path, JSON.stringify(body));
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(await res.json()).toEqual({ error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_request", param } });
    }
    const notJson = await post("/v1/realtime/client_secrets", "{");
    expect(notJson.status).toBe(400);
    expect((await notJson.json()).error).toMatchObject({ type: "invalid_request_error", code: "invalid_request" });
    const empty = await stack.fetch("/v1/realtime/transcription_sessions", { method: "POST", headers: { authorization: `Bearer ${key}` } });
    expect(empty.status).toBe(200);
    expect(empty.headers.get("cache-control")).toBe("no-store");
    expect(await empty.json()).toMatchObject({ input_audio_format: "pcm16", client_secret: { value: expect.stringMatching(/^ek_/) } });
  });

  it("both routes are in the generated OpenAPI document with their schemas", async () => {
    const doc = await (await stack.fetch("/openapi.json")).json();
    const ga = doc.paths["/v1/realtime/client_secrets"].post;
    expect(ga.requestBody.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/ClientSecretCreateRequest" });
    expect(ga.responses["200"].content["application/json"].schema).toEqual({ $ref: "#/components/schemas/ClientSecretCreateResponse" });
    expect(ga.security).toEqual([{ bearerAuth: [] }]);
    const beta = doc.paths["/v1/realtime/transcription_sessions"].post;
    expect(beta.requestBody.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/TranscriptionSessionCreateRequest" });
    expect(beta.responses["200"].content["application/json"].schema).toEqual({ $ref: "#/components/schemas/TranscriptionSession" });
    expect(doc.components.schemas.ClientSecretCreateRequest.properties.expires_after.properties.seconds).toMatchObject({ minimum: 10, maximum: 7200 });
    expect(doc.components.schemas.TranscriptionSessionConfig.properties).toHaveProperty("audio");
  });

  it("needs an sk- key: no key, or an ek_ secret, is 401", async () => {
    await expect401(await stack.fetch("/v1/realtime/client_secrets", { method: "POST" }), "missing_api_key");
    const { value } = await sdk(key).realtime.clientSecrets.create({});
    await expect401(await stack.fetch("/v1/realtime/client_secrets", { method: "POST", headers: { authorization: `Bearer ${value}` } }), "invalid_api_key");
  });
});

describe("client secrets at the native door's upgrade", () => {
  it("opens several connections as Bearer and as the browser subprotocol; the answer is exactly `realtime`", async () => {
    const { value } = await sdk(key).realtime.clientSecrets.create({ expires_after: { anchor: "created_at", seconds: 60 } });
    for (let i = 0; i < 2; i++) {
      expect(await openNative({ headers: { authorization: `Bearer ${value}` } })).toBe("");
      expect(await openNative({ headers: { authorization: `Bearer ${value}` }, protocols: ["realtime"] })).toBe("realtime");
      expect(await openNative({ protocols: ["realtime", `openai-insecure-api-key.${value}`] })).toBe("realtime");
      expect(await openNative({ protocols: ["realtime", `openai-insecure-api-key.${value}`, "openai-beta.realtime-v1"] })).toBe("realtime");
    }
    // an sk- key through the subprotocol too (OpenAI accepts it there); never echoed
    expect(await openNative({ protocols: [`openai-insecure-api-key.${key}`, "realtime"] })).toBe("realtime");
  });

  it("expired, forged and misplaced secrets are 401 before the upgrade", async () => {
    const stale = issueClientSecret(stack.sessionSecret, { keyId, ownerId: "ek-owner" } as never, new Date(Date.now() - 700_000), 600);
    const sub = (v: string) => ({ "sec-websocket-protocol": `realtime, openai-insecure-api-key.${v}` });
    await expect401(await refusal(wsUrl(stack.baseUrl), { authorization: `Bearer ${stale.value}` }), "invalid_api_key");
    await expect401(await refusal(wsUrl(stack.baseUrl), sub(stale.value)), "invalid_api_key");

    const { value } = await sdk(key).realtime.clientSecrets.create({});
    const [payload, sig] = value.slice(3).split(".") as [string, string];
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString());
    const longer = Buffer.from(JSON.stringify({ ...claims, exp: claims.exp + 86_400 })).toString("base64url");
    const otherSigner = issueClientSecret("not-the-service-secret", { keyId, ownerId: "ek-owner" } as never, new Date());
    for (const forged of [`ek_${longer}.${sig}`, `ek_${payload}.${sig.slice(0, -2)}xx`, otherSigner.value, `rt_${payload}.${sig}`, "ek_garbage"]) {
      const code = forged.startsWith("rt_") ? "invalid_session_token" : "invalid_api_key";
      await expect401(await refusal(wsUrl(stack.baseUrl), { authorization: `Bearer ${forged}` }), code);
      await expect401(await refusal(wsUrl(stack.baseUrl), sub(forged)), code);
    }

    // URLs never carry a client secret (nor a key); two credential entries are refused
    await expect401(await refusal(wsUrl(stack.baseUrl, `access_token=${encodeURIComponent(value)}`)), "invalid_api_key");
    await expect401(await refusal(wsUrl(stack.baseUrl, `token=${encodeURIComponent(value)}`)), "invalid_api_key");
    await expect401(await refusal(wsUrl(stack.baseUrl), { "sec-websocket-protocol": `realtime, openai-insecure-api-key.${value}, openai-insecure-api-key.${value}` }), "invalid_api_key");
    // nor does the HTTP API take one in place of a key
    await expect401(await stack.fetch("/v1/audio/transcriptions/session-token", { method: "POST", headers: { authorization: `Bearer ${value}` } }), "invalid_api_key");
    await expect401(await stack.fetch(`/v1/audio/transcriptions/session-token?key=${encodeURIComponent(value)}`, { method: "POST", headers: { authorization: `Bearer ${key}` } }), "invalid_api_key");
  });

  it("a revoked key's secrets are refused", async () => {
    const doomed = await stack.issueKey("pro", "ek-owner");
    const { value } = await sdk(doomed.key).realtime.clientSecrets.create({});
    expect(await openNative({ protocols: ["realtime", `openai-insecure-api-key.${value}`] })).toBe("realtime");
    const del = await stack.fetch(`/v1/external-transcription/keys/${doomed.id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.adminToken}` } });
    expect(del.status).toBe(200);
    await expect401(await refusal(wsUrl(stack.baseUrl), { authorization: `Bearer ${value}` }), "revoked_api_key");
    await expect401(await refusal(wsUrl(stack.baseUrl), { "sec-websocket-protocol": `realtime, openai-insecure-api-key.${value}` }), "revoked_api_key");
  });

  // last: it uses up this address's failed-authentication allowance
  it("failed client-secret attempts count against the address's throttle", async () => {
    const forged = `ek_${Buffer.from("{}").toString("base64url")}.AAAA`;
    let last = await refusal(wsUrl(stack.baseUrl), { authorization: `Bearer ${forged}` });
    for (let i = 0; i < 40 && last.status === 401; i++) last = await refusal(wsUrl(stack.baseUrl), { authorization: `Bearer ${forged}` });
    expect(last.status).toBe(429);
    expect(last.body.error.code).toBe("too_many_auth_failures");
  });
});
