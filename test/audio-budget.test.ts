import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectRt, extraGateways, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { fixturePath } from "./support/fixtures";
import { waitFor } from "./support/jobs-helpers";
import { startStack, type Stack } from "./support/stack";
import { startServiceProcess } from "./support/service-process";
import { budgetBlockSeconds } from "../domain/usage/quota";
import { encodeWav } from "../shared/audio/wav";

/**
 * One live audio budget per key and window across planes and gateway processes: two
 * realtime sessions of one key on two gateways draw from it as audio arrives and both
 * close 1008 audio_quota_exhausted when it runs out; a segment call is then refused.
 */
let stack: Stack;
const gateways = extraGateways(() => stack);
beforeAll(async () => {
  // PocketSphinx on a shared 2-core machine: the router's per-attempt timeout with room, so a
  // slow piece under a full suite's load is not a 502 where the budget is under test
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6" });
});
afterAll(async () => {
  await gateways.stopAll();
  await stack?.stop();
});

const WINDOW_BUDGET = 20;

describe("live audio budget", () => {
  it("two sessions on two gateways exhaust the window together; a segment call is then 429", async () => {
    const res = await stack.fetch("/v1/external-transcription/keys", {
      method: "POST",
      headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ owner_id: "budget", plan: "pro", limits: { maxAudioSecondsPerWindow: WINDOW_BUDGET } }),
    });
    const { key, id } = ((await res.json()) as any).data;
    const second = await gateways.start({});
    const headers = { authorization: `Bearer ${key}` };
    const a = await connectRt(wsUrl(stack.baseUrl), headers);
    expect((await a.next("session.created")).limits.remaining_audio_seconds).toBe(WINDOW_BUDGET);
    const b = await connectRt(wsUrl(second), headers);
    // live: the first session has already drawn its first slice (5 s) ahead of its audio
    const left = (await b.next("session.created")).limits.remaining_audio_seconds;
    expect(left).toBeGreaterThanOrEqual(WINDOW_BUDGET - 5);
    expect(left).toBeLessThanOrEqual(WINDOW_BUDGET);

    // 30 s of audio each, at 10× real time: 60 s offered against a 20 s window
    const stream = (client: typeof a) => streamPcm(client, silence(30), { speed: 10 }).catch(() => undefined);
    await Promise.all([stream(a), stream(b)]);
    const [ca, cb] = await Promise.all([a.closed, b.closed]);
    expect(ca).toEqual({ code: 1008, reason: "audio_quota_exhausted" });
    expect(cb).toEqual({ code: 1008, reason: "audio_quota_exhausted" });

    // billed: the window and not more than a frame's worth beyond it (documented tolerance 0.5 s)
    const billed = await waitFor(async () => {
      const row = await stack.db.selectFrom("usage_windows").select("audio_seconds").where("key_id", "=", id).executeTakeFirst();
      return row && Number(row.audio_seconds) >= WINDOW_BUDGET - 0.5 ? Number(row.audio_seconds) : undefined;
    }, { timeoutMs: 15_000, what: "the sessions' usage" });
    expect(billed).toBeLessThanOrEqual(WINDOW_BUDGET + 0.5);

    const form = new FormData();
    form.set("file", new Blob([readFileSync(fixturePath("jfk.wav"))], { type: "audio/wav" }), "jfk.wav");
    const seg = await stack.fetch("/v1/audio/transcriptions", { method: "POST", headers, body: form });
    expect(seg.status).toBe(429);
    expect(((await seg.json()) as any).error.code).toBe("audio_quota_exhausted");
    const job = await stack.fetch("/v1/audio/transcriptions/jobs", { method: "POST", headers: { ...headers, "content-type": "application/json" }, body: JSON.stringify({ audio_url: "https://127.0.0.1:1/a.wav" }) });
    expect(job.status).toBe(429);
    // a new session is refused at once
    const c = await connectRt(wsUrl(stack.baseUrl), headers);
    expect(await c.closed).toEqual({ code: 1008, reason: "audio_quota_exhausted" });
  });

  it("a segment request draws its clip from the same budget: of two parallel ones that do not both fit, one is refused", async () => {
    const res = await stack.fetch("/v1/external-transcription/keys", {
      method: "POST",
      headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ owner_id: "budget2", plan: "pro", limits: { maxAudioSecondsPerWindow: 15 } }),
    });
    const { key } = ((await res.json()) as any).data;
    const headers = { authorization: `Bearer ${key}` };
    const clip = () => {
      const form = new FormData();
      form.set("file", new Blob([readFileSync(fixturePath("jfk.wav"))], { type: "audio/wav" }), "jfk.wav");
      return form;
    };
    // two 11 s clips at once against 15 s: exactly one is transcribed
    const statuses = (await Promise.all([0, 1].map(() => stack.fetch("/v1/audio/transcriptions", { method: "POST", headers, body: clip() })))).map((r) => r.status).sort();
    expect(statuses).toEqual([200, 429]);
    // billed once: the usage read model shows one clip
    const usage = await waitFor(async () => {
      const u = (await (await stack.fetch("/v1/usage", { headers })).json()) as any;
      return u.audio_seconds.used > 0 ? u : undefined;
    }, { timeoutMs: 10_000, what: "the usage read model" });
    expect(usage.audio_seconds.used).toBeGreaterThan(10);
    expect(usage.audio_seconds.used).toBeLessThan(12);
    expect(usage.requests.window).toBe(1);
  });

  it("an unreadable counter is read as absent (started again from the read model), never as no limit", async () => {
    const res = await stack.fetch("/v1/external-transcription/keys", {
      method: "POST",
      headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ owner_id: "budget3", plan: "pro", limits: { maxAudioSecondsPerWindow: 15 } }),
    });
    const { key, id } = ((await res.json()) as any).data;
    const windowSeconds = stack.config.usage.windowSeconds;
    const start = Math.floor(Date.now() / 1000 / windowSeconds) * windowSeconds;
    await (await stack.nats.kv("budget")).put(`${id}.${start}`, "not a number");
    const clip = () => {
      const form = new FormData();
      form.set("file", new Blob([readFileSync(fixturePath("jfk.wav"))], { type: "audio/wav" }), "jfk.wav");
      return form;
    };
    const headers = { authorization: `Bearer ${key}` };
    const statuses = (await Promise.all([0, 1].map(() => stack.fetch("/v1/audio/transcriptions", { method: "POST", headers, body: clip() })))).map((r) => r.status).sort();
    expect(statuses).toEqual([200, 429]);
  });

  it("the segment plane holds at most a block (1% of the window) ahead of its clips, and gives it back after 1 s without requests", async () => {
    const window = 1000;
    const { key, id } = await issueBudgetKey("budget4", window);
    const headers = { authorization: `Bearer ${key}` };
    // a short clip, so the answer comes well within the second after the draw
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", headers, body: silenceForm(1) });
    expect(res.status).toBe(200);
    const clip = (((await res.json()) as any).duration as number);
    const counter = async () => {
      const start = Math.floor(Date.now() / 1000 / stack.config.usage.windowSeconds) * stack.config.usage.windowSeconds;
      return Number((await (await stack.nats.kv("budget")).get(`${id}.${start}`))!.string());
    };
    const held = (await counter()) - clip;
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThanOrEqual(budgetBlockSeconds(window) + 0.01);
    const back = await waitFor(async () => ((await counter()) - clip < 0.01 ? await counter() : undefined), { timeoutMs: 5000, what: "the block given back" });
    expect(back).toBeCloseTo(clip, 2);
  });

  it("segment requests of one key on two gateway processes never draw more than the window", async () => {
    const child = await startServiceProcess(stack, "http-gateway");
    try {
      const { key } = await issueBudgetKey("budget5", 12);
      const headers = { authorization: `Bearer ${key}` };
      const bases = [stack.baseUrl, `http://127.0.0.1:${child.port}`];
      // eight 5 s clips at once, four per gateway, against 12 s: two fit
      const statuses = await Promise.all(
        Array.from({ length: 8 }, async (_, i) => {
          const r = await fetch(`${bases[i % 2]}/v1/audio/transcriptions`, { method: "POST", headers, body: silenceForm(5) });
          await r.arrayBuffer();
          return r.status;
        }),
      );
      expect(statuses.filter((s) => s === 200)).toHaveLength(2);
      expect(statuses.filter((s) => s === 429)).toHaveLength(6);
    } finally {
      await child.kill();
    }
  });
});

async function issueBudgetKey(owner: string, windowSeconds: number): Promise<{ key: string; id: string }> {
  const res = await stack.fetch("/v1/external-transcription/keys", {
    method: "POST",
    headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ owner_id: owner, plan: "pro", limits: { maxAudioSecondsPerWindow: windowSeconds } }),
  });
  return ((await res.json()) as any).data;
}

function silenceForm(seconds: number): FormData {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(encodeWav(new Int16Array(16_000 * seconds)))], { type: "audio/wav" }), "silence.wav");
  form.set("response_format", "verbose_json");
  return form;
}
