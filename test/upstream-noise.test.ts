import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav } from "../shared/audio/wav";
import { fixturePath } from "./support/fixtures";
import { expectNoWordsFromNoise, noSpeechClips } from "./support/noise";
import { RELAXED_ADMISSION } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";
import { readFile } from "node:fs/promises";

/**
 * Whisper-class servers behind an OpenAI-compatible URL (speaches, vLLM, a hosted API)
 * invent words on silence and noise ("Thank you."). The upstream here is a real local
 * server that says "Thank you." to whatever it is sent: what it is sent is the speech
 * gate's to decide (shared/audio/speech-gate.ts), on every plane, for the upstream
 * worker (services/transcriber/worker-service.ts) and the fallback provider
 * (shared/workers/router.ts).
 */
const upload = (stack: Stack, key: string, wav: Uint8Array) => {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(wav)]), "clip.wav");
  form.set("response_format", "json");
  return stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
};

describe("an OpenAI-compatible upstream that hears words in anything", () => {
  let provider: ProviderServer;
  let stack: Stack;
  let key: string;
  beforeAll(async () => {
    provider = await startProviderServer("upstream");
    provider.behaviour.transcript = "Thank you.";
    stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", RT_UPSTREAM_PARTIALS: "true", ...RELAXED_ADMISSION });
    key = (await stack.issueKey("pro")).key;
  });
  afterAll(async () => {
    await stack?.stop();
    await provider?.close();
  });

  it("is never sent silence or noise: empty text on the segment, batch and realtime planes, billed as posted", { timeout: 240_000 }, async () => {
    // speech reaches it, and it answers as it answers everything
    const heard = await upload(stack, key, await readFile(fixturePath("jfk.wav")));
    // (jfk.wav is cut into pieces at its pauses: one "Thank you." each)
    expect(((await heard.json()) as { text: string }).text).toMatch(/^Thank you\.( Thank you\.)*$/);
    const before = provider.requests.length;
    expect(before).toBeGreaterThan(0);
    await expectNoWordsFromNoise(stack, key, "upstream-noise");
    expect(provider.requests.length, "requests to the upstream for clips without speech").toBe(before);
  });
});

describe("a fallback provider that hears words in anything", () => {
  let fallback: ProviderServer;
  let stack: Stack;
  let key: string;
  beforeAll(async () => {
    fallback = await startProviderServer("fallback");
    fallback.behaviour.transcript = "Thank you.";
    // no worker: every clip goes to the fallback provider
    stack = await startStack({ WORKER_EMBEDDED: "none", FALLBACK_OPENAI_URL: `${fallback.url}/v1` });
    key = (await stack.issueKey("pro")).key;
  });
  afterAll(async () => {
    await stack?.stop();
    await fallback?.close();
  });

  it("is never sent silence or noise either", { timeout: 120_000 }, async () => {
    const heard = await upload(stack, key, await readFile(fixturePath("jfk.wav")));
    // (jfk.wav is cut into pieces at its pauses: one "Thank you." each)
    expect(((await heard.json()) as { text: string }).text).toMatch(/^Thank you\.( Thank you\.)*$/);
    const before = fallback.requests.length;
    for (const [name, pcm] of noSpeechClips()) {
      const res = await upload(stack, key, encodeWav(pcm));
      expect(res.status, name).toBe(200);
      expect(((await res.json()) as { text: string }).text, name).toBe("");
    }
    expect(fallback.requests.length).toBe(before);
  });
});
