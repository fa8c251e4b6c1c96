import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sessionCreated } from "../schemas/realtime";
import { connectRt, fixture, RELAXED_ADMISSION, silence, wsUrl, type RtClient } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Partials from an OpenAI-compatible upstream (RT_UPSTREAM_PARTIALS=true): the open item
 * re-decoded whole every partial_interval_ms (services/vad/redecode.ts). The upstream is
 * a real local server that hears like a perfect recognizer: it answers each clip with
 * the words of jfk.wav's timed reference transcript (test/fixtures/jfk-words.json, force-
 * aligned by the embedded engine) that end inside the clip, after a fixed decode delay.
 * It finds where the clip sits in jfk.wav by its samples (the session streams jfk.wav
 * unchanged), so a clip that ends inside a word does not get that word: what the
 * agreement and settling rules are for.
 */
const T = "conversation.item.input_audio_transcription";
const reference = JSON.parse(readFileSync(resolve(import.meta.dirname, "fixtures/jfk-words.json"), "utf8")) as { transcript: string; words: { word: string; start: number; end: number }[] };
const jfk = fixture("jfk.wav");
const DECODE_DELAY_MS = 100;

let provider: ProviderServer;
let stack: Stack;
let key: string;

/** Where `clip` starts in jfk.wav (samples), or -1. */
function locate(clip: Int16Array): number {
  const probe = Math.min(clip.length, 320);
  if (probe === 0) return -1;
  outer: for (let o = 0; o + probe <= jfk.length; o++) {
    for (let i = 0; i < probe; i++) if (jfk[o + i] !== clip[i]) continue outer;
    return o;
  }
  return -1;
}

function hear(clip: Int16Array) {
  const at = locate(clip);
  if (at < 0) return [];
  const from = at / 16_000;
  const to = (at + clip.length) / 16_000;
  return reference.words.filter((w) => w.start >= from - 0.02 && w.end <= to).map((w) => ({ word: w.word, start: Math.max(0, w.start - from), end: w.end - from }));
}

beforeAll(async () => {
  provider = await startProviderServer("timed-reference");
  provider.behaviour.delayMs = DECODE_DELAY_MS;
  provider.behaviour.timedWords = hear;
  stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", RT_UPSTREAM_PARTIALS: "true", ...RELAXED_ADMISSION });
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
  await provider?.close();
});

/** 20 ms frames, each sent once its last sample has been spoken (at `speed` × real time); resolves with the wall-clock start. */
async function speak(c: RtClient, pcm: Int16Array, speed = 1): Promise<number> {
  const t0 = Date.now();
  for (let i = 0; i * 320 < pcm.length; i++) {
    const due = t0 + ((i + 1) * 20) / speed;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const frame = pcm.subarray(i * 320, (i + 1) * 320);
    c.sendAudio(new Uint8Array(frame.buffer, frame.byteOffset, frame.byteLength));
  }
  return t0;
}

const concat = (...parts: Int16Array[]) => {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) (out.set(p, at), (at += p.length));
  return out;
};

/** Per item: its deltas, its speech_stopped and its completed, in arrival order. */
function items(c: RtClient) {
  const byItem = new Map<string, { deltas: any[]; stopped?: any; completed?: any }>();
  for (const e of c.events) {
    if (!e.item_id) continue;
    const it = byItem.get(e.item_id) ?? { deltas: [] };
    byItem.set(e.item_id, it);
    if (e.type === `${T}.delta`) it.deltas.push(e);
    if (e.type === "input_audio_buffer.speech_stopped") it.stopped = e;
    if (e.type === `${T}.completed`) it.completed = e;
  }
  return [...byItem.values()].filter((i) => i.completed);
}

describe("partials from an upstream that decodes whole clips (RT_UPSTREAM_PARTIALS=true)", () => {
  it("streamed at real time: words in order and never retracted, the first within 1 s of its end, the final soon after the VAD stops and equal to the reference", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    const created = sessionCreated.parse(await c.next("session.created"));
    expect(created.input_audio_transcription?.streaming).toBe(true);
    expect(created.turn_detection_types).toEqual(["server_vad", "semantic_vad", "manual"]);
    const before = provider.requests.length;
    const t0 = await speak(c, concat(jfk, silence(1.5)));
    const completed: any[] = [];
    while (completed.map((e) => e.transcript).join(" ").split(" ").length < reference.words.length) completed.push(await c.next(`${T}.completed`, 10_000));
    const got = items(c);
    expect(got.length).toBe(completed.length);

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
    // bounded: one re-decode in flight for the one open item, and the commit
    expect(provider.maxInFlight).toBeLessThanOrEqual(2);
    c.ws.close();
    await c.closed;
  });

  it("accepts semantic_vad: the turn ends from the running hypothesis, and the deltas still add up to the final", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    c.sendJson({ type: "session.update", event_id: "u1", session: { turn_detection: { type: "semantic_vad", eagerness: "high" } } });
    expect((await c.next("session.updated")).session.turn_detection).toMatchObject({ type: "semantic_vad", eagerness: "high" });
    expect(c.events.some((e) => e.type === "error")).toBe(false);
    await speak(c, concat(jfk, silence(2)), 2);
    const completed: any[] = [];
    while (completed.map((e) => e.transcript).join(" ").split(" ").length < reference.words.length) completed.push(await c.next(`${T}.completed`, 10_000));
    const got = items(c);
    expect(got.map((i) => i.completed.transcript).join(" ")).toBe(reference.transcript);
    for (const i of got) expect(i.deltas.map((d) => d.delta).join("")).toBe(i.completed.transcript);
    c.ws.close();
    await c.closed;
  });
});
