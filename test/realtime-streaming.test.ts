import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serverEvent, sessionCreated } from "../schemas/realtime";
import { connectRt, fixture, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { pcm16MonoFromWav } from "../shared/audio/wav";

/**
 * Streaming recognition on the real stack (real NATS, Postgres, PocketSphinx decoders
 * spawned by the VAD service): partials while speaking, deltas that concatenate to the
 * final, opt-in interims, and the fallback when a decoder is killed mid-utterance.
 */
let stack: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6", RT_STREAM_DECODERS: "4" });
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
});

const bearer = () => ({ authorization: `Bearer ${key}` });
const T = "conversation.item.input_audio_transcription";
/** 7.1 s of continuous LibriVox speech (pocketsphinx-testdata). */
const longClip = () => pcm16MonoFromWav(readFileSync("/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0870.wav"))!;

/** Stream decoders this test process's stack spawned (ps-worker with the streaming options). */
function streamDecoderPids(): number[] {
  const kids = readFileSync(`/proc/${process.pid}/task/${process.pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
  return kids.filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").includes("-fwdflat");
    } catch {
      return false;
    }
  });
}

async function results(c: { events: any[] }, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const items = c.events.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    const done = c.events.filter((e) => e.type === `${T}.completed` || e.type === `${T}.failed`).map((e) => e.item_id);
    if (items.length > 0 && items.every((i) => done.includes(i))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("streaming recognition", () => {
  it("sends stable deltas and interims while the speaker talks; deltas concatenate to completed", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer());
    const created = await c.next("session.created");
    expect(sessionCreated.parse(created).input_audio_transcription).toEqual({ streaming: true, partial_interval_ms: 300, interim_results: false, smart_format: true });
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { interim_results: true, partial_interval_ms: 250 } } });
    expect((await c.next("session.updated")).session.input_audio_transcription).toMatchObject({ interim_results: true, partial_interval_ms: 250 });
    await streamPcm(c, silence(0.5), { speed: 1, chunkBytes: 640 });
    await streamPcm(c, longClip(), { speed: 1, chunkBytes: 640 }); // 20 ms frames in real time
    await streamPcm(c, silence(1), { speed: 1, chunkBytes: 640 });
    await results(c);
    for (const e of c.events) expect(serverEvent.safeParse(e).success, JSON.stringify(e)).toBe(true);

    const started = c.events.find((e) => e.type === "input_audio_buffer.speech_started");
    const item = started.item_id;
    const stopped = c.events.find((e) => e.type === "input_audio_buffer.speech_stopped" && e.item_id === item);
    const completed = c.events.filter((e) => e.type === `${T}.completed` && e.item_id === item);
    expect(completed).toHaveLength(1);
    expect(completed[0].worker_id).toMatch(/^stream:/);
    expect(completed[0].transcript.split(" ").length).toBeGreaterThan(8);
    const i = (e: any) => c.events.indexOf(e);
    const deltas = c.events.filter((e) => e.type === `${T}.delta` && e.item_id === item);
    const interims = c.events.filter((e) => e.type === `${T}.interim` && e.item_id === item);
    // words on screen before the speaker stopped: stable deltas and interims
    expect(deltas.filter((d) => i(d) < i(stopped) && d.delta.length > 0).length).toBeGreaterThan(0);
    expect(interims.filter((d) => i(d) < i(stopped)).length).toBeGreaterThan(2);
    expect(interims[0].__t - started.__t).toBeLessThan(1500);
    // append-only: the deltas, concatenated, are the final transcript; all before completed
    expect(deltas.map((d) => d.delta).join("")).toBe(completed[0].transcript);
    for (const d of [...deltas, ...interims]) expect(i(d)).toBeLessThan(i(completed[0]));
    for (const w of completed[0].words) {
      expect(w.start_ms).toBeGreaterThanOrEqual(completed[0].audio_start_ms);
      expect(w.end_ms).toBeLessThanOrEqual(completed[0].audio_end_ms);
    }
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
  });

  it("without interim_results no interims are sent", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer());
    await c.next("session.created");
    await streamPcm(c, fixture("ldc93s1.wav"), { speed: 2, chunkBytes: 640 });
    await streamPcm(c, silence(1), { speed: 2, chunkBytes: 640 });
    await results(c);
    expect(c.events.filter((e) => e.type === `${T}.interim`)).toHaveLength(0);
    const completed = c.events.filter((e) => e.type === `${T}.completed`);
    expect(completed.length).toBeGreaterThan(0);
    c.ws.close();
    await c.closed;
  });

  it("a decoder SIGKILLed mid-utterance: the item still gets exactly one completed, through the commit path", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer());
    await c.next("session.created");
    const pcm = longClip();
    await streamPcm(c, silence(0.3), { speed: 1, chunkBytes: 640 });
    await streamPcm(c, pcm.subarray(0, 16000 * 2.5), { speed: 1, chunkBytes: 640 });
    const started = await c.next("input_audio_buffer.speech_started");
    const pids = streamDecoderPids();
    expect(pids.length).toBeGreaterThan(0);
    for (const pid of pids) process.kill(pid, "SIGKILL");
    await streamPcm(c, pcm.subarray(16000 * 2.5), { speed: 1, chunkBytes: 640 });
    await streamPcm(c, silence(1), { speed: 1, chunkBytes: 640 });
    await results(c);
    await new Promise((r) => setTimeout(r, 1500)); // a second result would have arrived by now
    const finals = c.events.filter((e) => (e.type === `${T}.completed` || e.type === `${T}.failed`) && e.item_id === started.item_id);
    expect(finals).toHaveLength(1);
    expect(finals[0].type).toBe(`${T}.completed`);
    expect(finals[0].worker_id).not.toMatch(/^stream:/); // transcribed whole by the commit path
    expect(finals[0].transcript.length).toBeGreaterThan(10);
    // decoders come back: the next utterance streams again
    await streamPcm(c, fixture("ldc93s1.wav"), { speed: 2, chunkBytes: 640 });
    await streamPcm(c, silence(1), { speed: 2, chunkBytes: 640 });
    await results(c);
    const last = c.events.filter((e) => e.type === `${T}.completed`).at(-1);
    expect(last.item_id).not.toBe(started.item_id);
    expect(last.worker_id).toMatch(/^stream:/);
    c.ws.close();
    await c.closed;
  });
});
