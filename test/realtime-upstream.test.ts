import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { startRtTranscriber } from "../services/rt-transcriber/transcribe-utterances";
import { createLogger } from "../shared/logger";
import { connectRt, fixture, refusal, streamPcm, wsUrl } from "./support/realtime-support";

/**
 * The upstream circuit breaker end to end: no embedded worker, and the only provider
 * is a real local OpenAI-compatible server that fails every request. Utterances come
 * back `failed`; after the router's breaker threshold of consecutive failures the
 * open session is closed 1013 upstream_unavailable and new upgrades get 503
 * upstream_unavailable with Retry-After.
 */
let stack: Stack;
let provider: Server;
let posts = 0;
let delayMs = 0;
let inFlight = 0;
let maxInFlight = 0;

beforeAll(async () => {
  provider = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      posts++;
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      setTimeout(() => {
        inFlight--;
        res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: "model crashed", type: "server_error" } }));
      }, delayMs);
    });
  });
  await new Promise<void>((r) => provider.listen(0, "127.0.0.1", r));
  const port = (provider.address() as AddressInfo).port;
  stack = await startStack({
    WORKER_EMBEDDED: "none",
    FALLBACK_OPENAI_URL: `http://127.0.0.1:${port}/v1`,
    FALLBACK_OPENAI_MODEL: "whisper-1",
    FALLBACK_REAL_TIME_FACTOR: "2", // room for the slow provider below
    RT_TRANSCRIBE_CONCURRENCY: "4",
  });
});
afterAll(async () => {
  await stack?.stop();
  await new Promise((r) => provider?.close(r));
});

describe("upstream breaker (spec 3.3, 7.2, 7.3)", () => {
  it("keeps at most maxConcurrentUtterances (free: 2) of a session in the workers, across transcriber replicas", async () => {
    // a second transcriber replica on the same durable: 8 consumers' worth of concurrency
    const replica = await startRtTranscriber({ nats: stack.nats, sessions: stack.runtime.ctx.sessions, logger: createLogger("error"), router: () => stack.runtime.ctx.router, concurrency: 4, pieces: stack.config.workers.pieces });
    const { key } = await stack.issueKey("free");
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    expect((await c.next("session.created")).limits.max_concurrent_utterances).toBe(2);
    delayMs = 1500;
    const speech = fixture("jfk.wav").subarray(0, 16000 * 1.5);
    for (let i = 0; i < 4; i++) {
      await streamPcm(c, speech, { speed: Infinity });
      c.sendJson({ type: "input_audio_buffer.commit" });
      await c.next("input_audio_buffer.committed");
    }
    for (let i = 0; i < 4; i++) await c.next("conversation.item.input_audio_transcription.failed", 30_000);
    // four utterances committed at once, two replicas of concurrency 4: the session's limit holds
    expect(maxInFlight).toBe(2);
    delayMs = 0;
    await replica.stop();
    c.ws.close();
    await c.closed;
  });

  it("fails utterances, then closes 1013 upstream_unavailable and refuses upgrades 503 with Retry-After", async () => {
    const { key } = await stack.issueKey("pro");
    const auth = { authorization: `Bearer ${key}` };
    const c = await connectRt(wsUrl(stack.baseUrl), auth);
    await c.next("session.created");
    const speech = fixture("jfk.wav").subarray(0, 16000 * 1.5);
    for (let i = 0; i < 8 && c.ws.readyState === c.ws.OPEN; i++) {
      await streamPcm(c, speech, { speed: Infinity });
      c.sendJson({ type: "input_audio_buffer.commit" });
      await Promise.race([c.next("conversation.item.input_audio_transcription.failed", 10_000), c.closed]);
    }
    expect(await c.closed).toEqual({ code: 1013, reason: "upstream_unavailable" });
    const failed = c.events.filter((e) => e.type === "conversation.item.input_audio_transcription.failed");
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(failed[0].error.code).toBe("transcription_failed");
    expect(posts).toBeGreaterThanOrEqual(5);

    const r = await refusal(wsUrl(stack.baseUrl), auth);
    expect(r.status).toBe(503);
    expect(r.body.error.code).toBe("upstream_unavailable");
    expect(Number(r.headers["retry-after"])).toBeGreaterThanOrEqual(1);
  });
});
