import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sessionCreated } from "../schemas/realtime";
import { connectRt, RELAXED_ADMISSION, silence, wsUrl } from "./support/realtime-support";
import { concatPcm } from "./support/fixtures";
import { startStack, type Stack } from "./support/stack";
import { itemsOf, jfkTimedReference, speak } from "./support/timed-reference";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Partials from an OpenAI-compatible upstream (RT_UPSTREAM_PARTIALS=true): the open item
 * re-decoded whole every partial_interval_ms (services/vad/redecode.ts). The upstream is
 * a real local server that hears like a perfect recognizer (test/support/timed-reference.ts):
 * it answers each clip with the words of jfk.wav's timed reference transcript that end
 * inside the clip, after a fixed decode delay, so a clip that ends inside a word does not
 * get that word: what the agreement and settling rules are for. The strict latency
 * figures are bench/partials.ts's.
 */
const T = "conversation.item.input_audio_transcription";
const reference = jfkTimedReference();
const jfk = reference.pcm;
const DECODE_DELAY_MS = 100;

let provider: ProviderServer;
let stack: Stack;
let key: string;

beforeAll(async () => {
  provider = await startProviderServer("timed-reference");
  provider.behaviour.delayMs = DECODE_DELAY_MS;
  provider.behaviour.timedWords = (clip) => reference.hear(clip);
  stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", RT_UPSTREAM_PARTIALS: "true", ...RELAXED_ADMISSION });
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
  await provider?.close();
});

describe("partials from an upstream that decodes whole clips (RT_UPSTREAM_PARTIALS=true)", () => {
  it("streamed at real time: words in order and never retracted, the first within 1 s of its end, the final soon after the VAD stops and equal to the reference", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    const created = sessionCreated.parse(await c.next("session.created"));
    expect(created.input_audio_transcription?.streaming).toBe(true);
    expect(created.turn_detection_types).toEqual(["server_vad", "semantic_vad", "manual"]);
    const before = provider.requests.length;
    const t0 = await speak(c, concatPcm(jfk, silence(1.5)));
    const completed: any[] = [];
    while (completed.map((e) => e.transcript).join(" ").split(" ").length < reference.words.length) completed.push(await c.next(`${T}.completed`, 10_000));
    const got = itemsOf(c);
    expect(got.length).toBe(completed.length);
    console.log(`server_vad: ${got.map((i) => `${i.completed.transcript} [stopped ${i.stopped.audio_end_ms}]`).join(" | ")}; last stopped ${got.at(-1)!.stopped.__t - t0 - (jfk.length / 16)} ms after the audio's end`);

    // the final is the reference, and each item's deltas add up to its completed transcript
    expect(got.map((i) => i.completed.transcript).join(" ")).toBe(reference.transcript);
    for (const i of got) expect(i.deltas.map((d) => d.delta).join("")).toBe(i.completed.transcript);

    // words in order, none retracted: every delta appends the reference's next words
    const sent = got.flatMap((i) => i.deltas.map((d) => d.delta as string)).join(" ").split(/\s+/).filter(Boolean);
    expect(sent).toEqual(reference.transcript.split(" "));

    // text while speaking: a delta before speech_stopped on every item of 2 s or more, and the first one soon
    const partial = got.flatMap((i) => i.deltas.filter((d) => i.stopped && d.__t < i.stopped.__t));
    expect(partial.length).toBeGreaterThan(0);
    for (const i of got) if (i.completed.audio_end_ms - i.completed.audio_start_ms >= 2000) expect(i.deltas[0].__t).toBeLessThan(i.stopped.__t);
    const first = got[0]!.deltas[0]!;
    expect(first.delta.split(" ")[0]).toBe("And");
    const firstLatency = first.__t - (t0 + reference.words[0]!.end * 1000);
    const finals = got.map((i) => i.completed.__t - i.stopped.__t);
    console.log(`first delta ${firstLatency} ms after "And" ended; finals ${finals.join(", ")} ms after speech_stopped; ${provider.requests.length - before} upstream requests for ${got.length} items; ${partial.length} deltas before speech_stopped`);
    expect(firstLatency).toBeLessThanOrEqual(1000);
    // the strict figure (≤ 300 ms) is the bench's; a shared test machine gets room
    for (const f of finals) expect(f).toBeLessThanOrEqual(1000);
    c.ws.close();
    await c.closed;
  });

  it("the final is decoded during the pause that ends the item: it comes sooner after speech_stopped than one upstream decode takes, and a pause that speech resumes after does not end the item early", async () => {
    // one decode takes 600 ms: a final decoded after the commit cannot come within 600 ms
    // of speech_stopped; decoded from 200 ms into the 500 ms pause it comes about 300 ms after.
    // "your country, | ask what" holds a pause of about 0.45 s: a final prepared there is discarded.
    provider.behaviour.delayMs = 600;
    try {
      const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
      await c.next("session.created");
      const before = provider.requests.length;
      await speak(c, concatPcm(jfk, silence(2)));
      const completed: any[] = [];
      while (completed.map((e) => e.transcript).join(" ").split(" ").length < reference.words.length) completed.push(await c.next(`${T}.completed`, 15_000));
      const got = itemsOf(c);
      const finals = got.map((i) => i.completed.__t - i.stopped.__t);
      console.log(`decode 600 ms: finals ${finals.join(", ")} ms after speech_stopped; ${provider.requests.length - before} upstream requests for ${got.length} items`);
      expect(got.map((i) => i.completed.transcript).join(" ")).toBe(reference.transcript);
      for (const i of got) expect(i.deltas.map((d) => d.delta).join("")).toBe(i.completed.transcript);
      for (const f of finals) expect(f).toBeLessThan(600);
      c.ws.close();
      await c.closed;
    } finally {
      provider.behaviour.delayMs = DECODE_DELAY_MS;
    }
  });

  it("accepts semantic_vad: turns end from the running hypothesis, and the deltas still add up to the final", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    c.sendJson({ type: "session.update", event_id: "u1", session: { turn_detection: { type: "semantic_vad", eagerness: "high" } } });
    expect((await c.next("session.updated")).session.turn_detection).toMatchObject({ type: "semantic_vad", eagerness: "high" });
    expect(c.events.some((e) => e.type === "error")).toBe(false);
    const t0 = await speak(c, concatPcm(jfk, silence(2)));
    const completed: any[] = [];
    while (completed.map((e) => e.transcript).join(" ").split(" ").length < reference.words.length) completed.push(await c.next(`${T}.completed`, 10_000));
    const got = itemsOf(c);
    expect(got.map((i) => i.completed.transcript).join(" ")).toBe(reference.transcript);
    for (const i of got) expect(i.deltas.map((d) => d.delta).join("")).toBe(i.completed.transcript);
    // the last turn ends in "country." (complete: high commits after 150 ms of silence once a
    // read has heard the pause) where server_vad waits 500 ms: logged, not asserted (load)
    console.log(`semantic_vad: ${got.map((i) => `${i.completed.transcript} [stopped ${i.stopped.audio_end_ms}]`).join(" | ")}; last stopped ${got.at(-1)!.stopped.__t - t0 - (jfk.length / 16)} ms after the audio's end`);
    c.ws.close();
    await c.closed;
  });

  it("bounded: a slow upstream gets one re-decode of the open item at a time, however often the hypothesis is due", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    // under the router's 800 ms attempt budget for a short clip, over two reads' interval
    provider.behaviour.delayMs = 700;
    provider.maxInFlight = 0;
    const before = provider.requests.length;
    try {
      // "And so my fellow Americans," (2.2 s: seven reads due every 300 ms), then the commit
      await speak(c, concatPcm(jfk.subarray(0, 16_000 * 2.3), silence(1)));
      await c.next(`${T}.completed`, 15_000);
    } finally {
      provider.behaviour.delayMs = DECODE_DELAY_MS;
    }
    // at most one re-decode in flight, and at the commit the item's last one (dropped, the
    // server still sleeping on it) beside the commit's decode
    expect(provider.maxInFlight).toBeLessThanOrEqual(2);
    const requests = provider.requests.length - before;
    console.log(`slow upstream: ${requests} requests (re-decodes and the commit) for 3.3 s of audio`);
    expect(requests).toBeGreaterThanOrEqual(2);
    // back to back at 700 ms each over at most 3.3 s of item audio, and the commit: reads
    // every 300 ms, unbounded, would be about eleven
    expect(requests).toBeLessThanOrEqual(7);
    c.ws.close();
    await c.closed;
  });

  it("a long item: past 10 s only its unconfirmed tail is re-decoded, the confirmed words as the prompt; the final is the whole item's", { timeout: 60_000 }, async () => {
    const twice = jfkTimedReference({ twice: true });
    provider.behaviour.timedWords = (clip) => twice.hear(clip);
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    c.sendJson({ type: "session.update", session: { turn_detection: { type: "server_vad", silence_duration_ms: 2000, max_utterance_ms: 30000 } } });
    await c.next("session.updated");
    const before = provider.requests.length;
    try {
      await speak(c, concatPcm(twice.pcm, silence(2.5)), 2);
      await c.next(`${T}.completed`, 15_000);
    } finally {
      provider.behaviour.timedWords = (clip) => reference.hear(clip);
    }
    const got = itemsOf(c);
    expect(got).toHaveLength(1);
    expect(got[0]!.completed.transcript).toBe(twice.transcript);
    expect(got[0]!.deltas.map((d) => d.delta).join("")).toBe(twice.transcript);
    const sent = provider.requests.slice(before);
    const tails = sent.filter((r) => r.prompt?.startsWith("And so my fellow Americans,"));
    console.log(`long item: ${sent.length} requests, ${tails.length} of them tails (at most ${Math.max(...tails.map((r) => r.samples)) / 16_000} s)`);
    expect(tails.length).toBeGreaterThan(0);
    // a tail stays near 10 s (the cadence and one decode past it) while the item runs to 22 s
    for (const r of tails) expect(r.samples).toBeLessThan(16_000 * 13);
    c.ws.close();
    await c.closed;
  });
});
