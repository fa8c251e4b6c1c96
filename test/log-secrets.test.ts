import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectRt, fixture, streamPcm, silence, wsUrl } from "./support/realtime-support";
import { fixturePath } from "./support/fixtures";
import { readBody, startHttp, waitFor, type LocalHttp } from "./support/jobs-helpers";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";
import { startStack, type Stack } from "./support/stack";

/**
 * Logs carry no secrets: one `stt serve` process running every service at LOG_LEVEL=debug
 * goes through the flows that handle them (admin key issue, a failed authentication,
 * session token, realtime session opened with the token in the URL, client secret used
 * as Bearer and as a browser subprotocol (and refused forged or in a URL), a segment request,
 * a batch job with a signed webhook), and its captured output must not contain any
 * issued key, token or secret. Every line must also be a JSON record from the logger.
 */
describe("logs", () => {
  let stack: Stack;
  let serve: ServiceProcess;
  let receiver: LocalHttp;
  let base: string;
  const webhookSecret = `whsec_${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
  const deliveries: string[] = [];

  beforeAll(async () => {
    // the test's own stack only serves the admin route that issues the first key
    stack = await startStack({ STT_SERVICES: "http-gateway,projector" });
    receiver = await startHttp(async (req, res) => {
      deliveries.push((await readBody(req)).toString());
      res.writeHead(200).end();
    });
    serve = await startServiceProcess(stack, "all", {
      LOG_LEVEL: "debug",
      GATEWAY_ADMIN_TOKEN: stack.adminToken,
      WEBHOOK_SIGNING_SECRET: webhookSecret,
      JOB_ALLOW_PRIVATE_URLS: "true",
      OBJECT_STORE_DIR: `${stack.config.dataDir}/objects`,
    });
    base = `http://127.0.0.1:${serve.port}`;
  });

  afterAll(async () => {
    await serve?.kill();
    await receiver?.stop();
    await stack?.stop();
  });

  it("carry no key, token or secret through every plane's flow", async () => {
    const issued = await fetch(`${base}/v1/external-transcription/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ owner_id: "logs", plan: "pro" }),
    });
    const key: string = ((await issued.json()) as any).data.key;
    expect(key).toMatch(/^sk-/);

    const bogus = `sk-${"b".repeat(40)}`;
    expect((await fetch(`${base}/v1/audio/transcriptions/jobs/00000000-0000-8000-8000-000000000000`, { headers: { authorization: `Bearer ${bogus}` } })).status).toBe(401);

    const tokenRes = await fetch(`${base}/v1/audio/transcriptions/session-token`, { method: "POST", headers: { authorization: `Bearer ${key}` } });
    const token: string = ((await tokenRes.json()) as any).token;
    expect(token).toMatch(/^rt_/);
    const rt = await connectRt(wsUrl(base, `access_token=${encodeURIComponent(token)}`));
    await rt.next("session.created");
    await streamPcm(rt, fixture("jfk.wav"), { speed: 4 });
    await streamPcm(rt, silence(1.5), { speed: 4 });
    await rt.next("conversation.item.input_audio_transcription.completed", 30_000);
    rt.ws.close(1000);
    await rt.closed;
    // a spent token used again is refused, and that refusal is logged without it
    await connectRt(wsUrl(base, `access_token=${encodeURIComponent(token)}`)).then(
      (c) => c.ws.close(),
      () => undefined,
    );

    // a client secret, as Bearer and as a browser's subprotocol (twice: it is reusable),
    // and refused when forged or placed in the URL
    const secretRes = await fetch(`${base}/v1/realtime/client_secrets`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ session: { type: "transcription", audio: { input: { transcription: { prompt: "log-secrets" } } } } }),
    });
    const clientSecret: string = ((await secretRes.json()) as any).value;
    expect(clientSecret).toMatch(/^ek_/);
    for (const [headers, protocols] of [
      [{ authorization: `Bearer ${clientSecret}` }, []],
      [{}, ["realtime", `openai-insecure-api-key.${clientSecret}`]],
    ] as const) {
      const c = await connectRt(wsUrl(base), headers, [...protocols]);
      expect(c.ws.protocol).toBe(protocols.length ? "realtime" : "");
      await c.next("session.created");
      c.ws.close(1000);
      await c.closed;
    }
    const forgedSecret = `${clientSecret.slice(0, -4)}AAAA`;
    for (const [query, headers, protocols] of [
      ["", {}, ["realtime", `openai-insecure-api-key.${forgedSecret}`]],
      ["", { authorization: `Bearer ${forgedSecret}` }, []],
      [`access_token=${encodeURIComponent(clientSecret)}`, {}, []],
    ] as const) {
      await connectRt(wsUrl(base, query), headers, [...protocols]).then(
        (c) => c.ws.close(),
        () => undefined,
      );
    }

    const form = new FormData();
    form.set("file", new Blob([readFileSync(fixturePath("jfk.wav"))], { type: "audio/wav" }), "jfk.wav");
    form.set("response_format", "json");
    expect((await fetch(`${base}/v1/audio/transcriptions`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form })).status).toBe(200);

    const audio = await startHttp((_req, res) => res.writeHead(200, { "content-type": "audio/wav" }).end(readFileSync(fixturePath("jfk.wav"))));
    try {
      const submitted = await fetch(`${base}/v1/audio/transcriptions/jobs`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ audio_url: `${audio.url}/jfk.wav?sig=s3cr3tQuery`, webhook_url: `${receiver.url}/hook` }),
      });
      expect(submitted.status).toBe(202);
      await waitFor(async () => deliveries.length > 0, { timeoutMs: 60_000, what: "the webhook" });
    } finally {
      await audio.stop();
    }

    const output = serve.output();
    for (const [what, secret] of [
      ["issued key", key],
      ["failed key", bogus],
      ["session token", token],
      ["client secret", clientSecret],
      ["forged client secret", forgedSecret],
      ["admin token", stack.adminToken],
      ["session-token secret", stack.sessionSecret],
      ["webhook signing secret", webhookSecret],
    ] as const) {
      expect(output.includes(secret), `${what} found in the logs`).toBe(false);
    }
    const lines = output.split("\n").filter((l) => l.trim() !== "");
    expect(lines.length).toBeGreaterThan(20);
    const records = lines.filter((l) => l.startsWith("{"));
    for (const l of records) expect(JSON.parse(l)).toMatchObject({ level: expect.stringMatching(/^(debug|info|warn|error)$/), msg: expect.any(String), t: expect.any(String) });
    // debug records were written, so the check covered the chattiest level
    expect(records.some((l) => l.includes('"level":"debug"'))).toBe(true);
  });
});
