import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { planPieces } from "../domain/transcript/pieces";
import { encodeWav } from "../shared/audio/wav";
import type { RunningRouter } from "../shared/workers/router";
import { waitFor } from "./support/jobs-helpers";
import { labelledSpeech } from "./support/long-speech";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * docs/design/segment.md, "Long clips in parallel", with an OpenAI-compatible worker (a real
 * local HTTP server standing in for the provider, WORKER_OPENAI_URL): each piece is an
 * ordinary request to it, the pieces of two tenants' long clips take turns on the
 * engines (the fair scheduler, owners round-robin), one request never has more than
 * SEGMENT_PIECES_IN_FLIGHT pieces in the engines, and `stream=true` sends the first
 * piece's text while later pieces are still being transcribed.
 *
 * The provider answers each piece after `delayMs`, naming the length it heard; requests
 * carry the tenant in `prompt`, so its log shows whose piece reached the engine when.
 */
const speech = labelledSpeech(26); // 26.3 s, cut at its pauses into pieces of at most 5 s
const wav = encodeWav(speech.pcm);
/** What the gateway plans for two engine slots (pieces of about 26.3 / 8 s, cut at pauses). */
const PIECES = planPieces(speech.pcm, 2, { splitMinSeconds: 8, maxPieceSeconds: 5, minPieceSeconds: 1 }).length;

async function serviceWith(provider: ProviderServer, env: Record<string, string>): Promise<Stack> {
  const stack = await startStack({
    STT_SERVICES: "projector,transcriber,http-gateway",
    WORKER_EMBEDDED: "none",
    WORKER_OPENAI_URL: provider.url,
    WORKER_ID: "provider",
    SEGMENT_PIECE_MAX_SECONDS: "5",
    ...env,
  });
  await waitFor(async () => (stack.runtime.ctx.router as RunningRouter).workers().some((w) => w.warm), { timeoutMs: 20_000, what: "the provider's worker warm" });
  return stack;
}

const post = (stack: Stack, key: string, fields: Record<string, string>) => {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(wav)]), "long.wav");
  for (const [k, v] of Object.entries(fields)) form.set(k, v);
  return stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(60_000) });
};

describe("two engine slots (WORKER_OPENAI_CONCURRENCY=2), the default cap per request", () => {
  let provider: ProviderServer;
  let stack: Stack;
  let a: string;
  let b: string;

  beforeAll(async () => {
    provider = await startProviderServer("primary");
    // the provider answers a piece of 1-5 s after up to 1 s: declared, as a user would for
    // such a provider, so the per-attempt timeout (router.ts) never cuts a slow piece off
    // on a busy machine, whichever test has taught the worker its observed speed
    stack = await serviceWith(provider, { WORKER_OPENAI_CONCURRENCY: "2", WORKER_OPENAI_REAL_TIME_FACTOR: "1" });
    a = (await stack.issueKey("pro", "tenant-a")).key;
    b = (await stack.issueKey("pro", "tenant-b")).key;
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    await provider?.close();
  });

  it("two tenants' long clips at once take turns on the engines", { timeout: 60_000 }, async () => {
    provider.requests.length = 0;
    provider.behaviour.delayMs = 400;
    const first = post(stack, a, { prompt: "tenant-a" });
    // tenant A holds both slots before tenant B asks
    await waitFor(async () => provider.requests.length >= 2, { timeoutMs: 20_000, what: "A's first pieces at the provider" });
    const second = post(stack, b, { prompt: "tenant-b" });
    const [ra, rb] = await Promise.all([first, second]);
    expect([ra.status, rb.status]).toEqual([200, 200]);
    expect([ra.headers.get("x-segment-pieces"), rb.headers.get("x-segment-pieces")]).toEqual([String(PIECES), String(PIECES)]);
    const order = provider.requests.map((r) => (r.prompt === "tenant-a" ? "A" : "B")).join("");
    console.log(`pieces at the engine, in order: ${order}`);
    // FIFO would be AAAAAABBBBBB (with six pieces each); owners take turns once B is waiting, until A has none left
    expect(PIECES).toBeGreaterThanOrEqual(6);
    expect(order).toBe(`AA${"BA".repeat(PIECES - 2)}BB`);
    for (const res of [ra, rb]) {
      const body = (await res.json()) as any;
      expect(body.segments).toHaveLength(PIECES);
      expect(body.segments[0].start).toBe(0);
      for (let i = 1; i < PIECES; i++) expect(body.segments[i].start).toBeCloseTo(body.segments[i - 1].end, 3);
      expect(body.segments.at(-1).end).toBeCloseTo(speech.seconds, 2);
      for (let i = 1; i < body.words.length; i++) expect(body.words[i].start).toBeGreaterThanOrEqual(body.words[i - 1].end - 1e-9);
      expect(body.text).toMatch(new RegExp(`^primary heard \\d\\.\\d\\d seconds( primary heard \\d\\.\\d\\d seconds){${PIECES - 1}}$`));
    }
  });

  it("stream=true: the first piece's text comes while later pieces are still at the engine", { timeout: 60_000 }, async () => {
    provider.requests.length = 0;
    provider.behaviour.delayMs = 1000;
    const res = await post(stack, a, { stream: "true", response_format: "json" });
    expect(res.status).toBe(200);
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    const events: any[] = [];
    let sentWhenFirstDelta: number | undefined;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = JSON.parse(buffer.slice(6, end));
        buffer = buffer.slice(end + 2);
        if (event.type === "transcript.text.delta" && sentWhenFirstDelta === undefined) sentWhenFirstDelta = provider.requests.length;
        events.push(event);
      }
    }
    const deltas = events.filter((e) => e.type === "transcript.text.delta").map((e) => e.delta);
    expect(deltas).toHaveLength(PIECES);
    expect(events.at(-1)).toMatchObject({ type: "transcript.text.done", text: deltas.join("") });
    // pieces 0 and 1 answered, 2 and 3 sent on; 4 and 5 wait for those
    expect(sentWhenFirstDelta).toBeLessThanOrEqual(4);
  });
});

describe("four engine slots, SEGMENT_PIECES_IN_FLIGHT=2", () => {
  let provider: ProviderServer;
  let stack: Stack;
  let key: string;

  beforeAll(async () => {
    provider = await startProviderServer("primary");
    stack = await serviceWith(provider, { WORKER_OPENAI_CONCURRENCY: "4", SEGMENT_PIECES_IN_FLIGHT: "2" });
    key = (await stack.issueKey("pro", "tenant-capped")).key;
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    await provider?.close();
  });

  it("one request never has more than its cap of pieces in the engines", { timeout: 60_000 }, async () => {
    provider.behaviour.delayMs = 300;
    const res = await post(stack, key, { response_format: "json" });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-segment-pieces")).toBe(String(PIECES));
    expect(provider.requests).toHaveLength(PIECES);
    expect(provider.maxInFlight).toBe(2);
  });
});
