import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serverEvent, sessionCreated } from "../schemas/realtime";
import { connectRt, fixture, silence, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { pcm16MonoFromWav } from "../shared/audio/wav";
import { wordErrorRate } from "../shared/workers/wer";

/**
 * Semantic end of turn on the real stack (real NATS, Postgres, the VAD's streaming
 * PocketSphinx decoders): semantic_vad ends a turn whose words look finished sooner than
 * server_vad's silence, and waits through a pause whose words look mid-sentence, which
 * server_vad cuts. Both are checked on the audio timeline (which audio ended up in which
 * item), not on how fast the machine is: the client stops sending where a decision is due
 * and waits for it, and the VAD decides when the pause's hypothesis arrives.
 */
let stack: Stack;
let plain: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6", RT_STREAM_DECODERS: "4" });
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
  await plain?.stop();
});

const T = "conversation.item.input_audio_transcription";
const LIBRI = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-";
const clip = (n: string) => pcm16MonoFromWav(readFileSync(`${LIBRI}${n}.wav`))!;
const ms = (n: number) => Math.round(n * 16);
const FRAME = { speed: 1, chunkBytes: 640 }; // 20 ms frames in real time

async function session(turn: Record<string, unknown>): Promise<RtClient> {
  const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
  await c.next("session.created");
  c.sendJson({ type: "session.update", session: { turn_detection: turn } });
  expect((await c.next("session.updated")).session.turn_detection).toMatchObject(turn);
  return c;
}

/** Waits until `pred` holds on the events (a generous cap: a loaded machine is slow, not wrong). */
async function until(c: RtClient, what: string, pred: (events: any[]) => boolean, timeoutMs = 120_000) {
  for (const deadline = Date.now() + timeoutMs; !pred(c.events); ) {
    if (Date.now() > deadline) throw new Error(`${what} never happened: ${JSON.stringify(c.events.map((e) => e.type))}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
const committed = (c: RtClient) => c.events.filter((e) => e.type === "input_audio_buffer.committed");
/** Every committed item has its result; then the session closes 1000. */
async function finish(c: RtClient) {
  await until(c, "a result for every committed item", (ev) => {
    const items = ev.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    return items.length > 0 && items.every((i) => ev.some((e) => (e.type === `${T}.completed` || e.type === `${T}.failed`) && e.item_id === i));
  });
  c.sendJson({ type: "session.close" });
  expect((await c.closed).code).toBe(1000);
  for (const e of c.events) expect(serverEvent.safeParse(e).success, JSON.stringify(e)).toBe(true);
}

describe("semantic end of turn", () => {
  // ldc93s1.wav ("She had your dark suit in greasy wash water all year."; its voice ends at
  // 2.79 s of 2.92 s), 200 ms of silence, then "He was not an ill-disposed young man"
  // (0880) from 200 ms in (its voice starts at 0.27 s): a pause of about 400 ms, under
  // server_vad's 500. A cold decoder hears the end as "… toro year" (log10 P(</s>) -0.66).
  const sentence = fixture("ldc93s1.wav");
  const next = clip("0880").subarray(ms(200));
  const nextStartsMs = 2920 + 200 + 70;

  it("a finished sentence followed by silence: semantic_vad commits in the pause, server_vad's 500 ms does not", async () => {
    const semantic = await session({ type: "semantic_vad", eagerness: "medium", early_turn_events: true });
    await streamPcm(semantic, sentence, FRAME);
    await streamPcm(semantic, silence(0.2), FRAME);
    // no more audio until the VAD has decided: it decides when the pause's hypothesis arrives
    await until(semantic, "the semantic commit in the pause", (ev) => ev.some((e) => e.type === "input_audio_buffer.committed"));
    const first = committed(semantic)[0];
    expect(first).toMatchObject({ reason: "vad" });
    expect(first.audio_end_ms).toBeLessThan(nextStartsMs);
    // the early signal came first, for the same item, where speech paused
    const likely = semantic.events.find((e) => e.type === "input_audio_buffer.turn_end_likely");
    expect(likely).toMatchObject({ item_id: first.item_id });
    expect(semantic.events.indexOf(likely)).toBeLessThan(semantic.events.indexOf(first));
    expect(likely.audio_end_ms).toBeLessThanOrEqual(first.audio_end_ms);
    await streamPcm(semantic, next, FRAME);
    await streamPcm(semantic, silence(2), FRAME);
    await finish(semantic);
    expect(committed(semantic).length).toBeGreaterThanOrEqual(2);

    const silenceOnly = await session({ type: "server_vad", silence_duration_ms: 500 });
    for (const pcm of [sentence, silence(0.2), next, silence(2)]) await streamPcm(silenceOnly, pcm, FRAME);
    await finish(silenceOnly);
    // the pause did not end its turn: the sentence and the next one are one item
    const items = committed(silenceOnly);
    expect(items[0].audio_start_ms).toBeLessThan(2790);
    expect(items[0].audio_end_ms).toBeGreaterThan(nextStartsMs);
    // without early_turn_events (and with server_vad) no early events
    expect(silenceOnly.events.some((e) => e.type.startsWith("input_audio_buffer.turn_"))).toBe(false);
  });

  // "… in his power to do for | them." (0870 cut after "for", at 6.6 s): a cold decoder
  // hears "… to do for" (log10 P(</s>) -2.0) and the speaker pauses 700 ms mid-sentence.
  const long = clip("0870");
  const REFERENCE = "and mister john dashwood had then leisure to consider how much there might be prudently in his power to do for them";

  it("a mid-sentence pause: server_vad cuts it, semantic_vad waits and keeps the sentence in one item, with the same transcript quality", async () => {
    const play = async (c: RtClient) => {
      for (const pcm of [long.subarray(0, ms(6600)), silence(0.7), long.subarray(ms(6600)), silence(2)]) await streamPcm(c, pcm, FRAME);
      await finish(c);
    };
    const silenceOnly = await session({ type: "server_vad", silence_duration_ms: 500 });
    const semantic = await session({ type: "semantic_vad", eagerness: "medium" });
    await Promise.all([play(silenceOnly), play(semantic)]);
    // server_vad committed during the pause; semantic_vad's first item runs past it
    expect(committed(silenceOnly)[0].audio_end_ms).toBeLessThan(6600 + 700);
    expect(committed(semantic)[0].audio_end_ms).toBeGreaterThan(6600 + 700);
    expect(semantic.events.some((e) => e.type.startsWith("input_audio_buffer.turn_"))).toBe(false); // off by default
    // the word error rate bound of the streaming tests (test/realtime-streaming.test.ts)
    for (const c of [silenceOnly, semantic]) {
      const text = c.events.filter((e) => e.type === `${T}.completed`).map((e) => e.transcript).join(" ");
      const w = wordErrorRate(REFERENCE, text);
      console.log(`WER ${(w.wer * 100).toFixed(1)}%: ${text}`);
      expect(w.wer).toBeLessThanOrEqual(0.6);
    }
  });
});

describe("turn_detection on the native door", () => {
  it("session.created lists semantic_vad where the engine streams; semantic_vad shows its eagerness (auto) and early events (off)", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    expect(sessionCreated.parse(await c.next("session.created")).turn_detection_types).toEqual(["server_vad", "semantic_vad", "manual"]);
    c.sendJson({ type: "session.update", session: { turn_detection: { type: "semantic_vad" } } });
    expect((await c.next("session.updated")).session.turn_detection).toMatchObject({ type: "semantic_vad", eagerness: "auto", early_turn_events: false, silence_duration_ms: 500 });
    c.sendJson({ type: "session.update", session: { turn_detection: { eagerness: "eager" } } });
    expect((await c.next("error")).error.code).toBe("invalid_event");
    c.sendJson({ type: "session.update", session: { turn_detection: { type: "server_vad" } } });
    const back = (await c.next("session.updated")).session.turn_detection;
    expect(back.type).toBe("server_vad");
    expect(back).not.toHaveProperty("eagerness");
    c.ws.close();
    await c.closed;
  });

  it("an engine that cannot stream keeps silence-only detection: session.created says so, semantic_vad is refused", async () => {
    plain = await startStack({ RT_STREAM_DECODERS: "0" });
    const k = (await plain.issueKey("pro")).key;
    const c = await connectRt(wsUrl(plain.baseUrl), { authorization: `Bearer ${k}` });
    const created = sessionCreated.parse(await c.next("session.created"));
    expect(created.turn_detection.type).toBe("server_vad");
    expect(created.turn_detection_types).toEqual(["server_vad", "manual"]);
    c.sendJson({ type: "session.update", event_id: "u1", session: { turn_detection: { type: "semantic_vad", eagerness: "high" } } });
    expect((await c.next("error")).error).toMatchObject({ type: "invalid_request_error", code: "semantic_vad_unavailable", event_id: "u1" });
    c.sendJson({ type: "session.update", session: { turn_detection: { silence_duration_ms: 600 } } });
    expect((await c.next("session.updated")).session.turn_detection).toMatchObject({ type: "server_vad", silence_duration_ms: 600 });
    c.ws.close();
    await c.closed;
  });
});
