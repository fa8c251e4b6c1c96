import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { concatPcm } from "./support/fixtures";
import { connectRt, fixture, refusal, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Admission from the measured cost of the configured engine when it decodes whole clips
 * (whisper.cpp, an OpenAI-compatible upstream with RT_UPSTREAM_PARTIALS): what a
 * speaker costs is the share of the engines' slots its re-decodes and finals hold
 * (services/vad/redecode.ts `engineShare`), not the embedded engine's prior. Here the
 * upstream takes 2 clips at once and answers each after 600 ms: a speaker's item is
 * re-decoded all the time it talks (a read every 300 ms of speech, one in flight), so
 * one speaker holds about half the engine and a second would take it past
 * RT_ADMIT_MAX_ENGINE_SHARE (0.6): refused 503 with Retry-After, where the embedded
 * engine's prior (0.085 cores a speaker) would have let in a dozen.
 */
let provider: ProviderServer;
let stack: Stack;
let key: string;

beforeAll(async () => {
  provider = await startProviderServer("slow-upstream");
  provider.behaviour.delayMs = 600;
  provider.behaviour.transcript = "and so my fellow americans";
  stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_OPENAI_CONCURRENCY: "2", WORKER_HEARTBEAT_MS: "500", RT_UPSTREAM_PARTIALS: "true", RT_ADMIT_MAX_ENGINE_SHARE: "0.6", RT_ENGINE_SPEAKER_CORES: "0.085" });
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
  await provider?.close();
});

const auth = () => ({ authorization: `Bearer ${key}` });

describe("admission with an engine that decodes whole clips", () => {
  it("a speaker who holds half the upstream's slots leaves no room for a second: 503 with Retry-After; a session is admitted before and after", async () => {
    // an idle plane admits
    const early = await connectRt(wsUrl(stack.baseUrl), auth());
    await early.next("session.created");
    early.ws.close(1000);
    await early.closed;

    const speaker = await connectRt(wsUrl(stack.baseUrl), auth());
    await speaker.next("session.created");
    const jfk = fixture("jfk.wav");
    const talking = streamPcm(speaker, concatPcm(jfk, jfk), { speed: 1 });
    // a few report intervals of measured decodes
    await new Promise((r) => setTimeout(r, 6000));
    const refused = await refusal(wsUrl(stack.baseUrl), auth());
    expect(refused.status).toBe(503);
    expect(refused.body.error.message).toMatch(/cannot take another speaker/);
    expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1);
    console.log(`refused while one speaker talks: ${refused.body.error.message}`);
    await talking;
    // the speaker stops (silence past a pause): room again
    await streamPcm(speaker, silence(5), { speed: 1 });
    const next = await connectRt(wsUrl(stack.baseUrl), auth());
    await next.next("session.created");
    next.ws.close(1000);
    speaker.ws.close(1000);
    await Promise.all([next.closed, speaker.closed]);
  });
});
