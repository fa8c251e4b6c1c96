import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wordErrorRate } from "../shared/workers/wer";
import { OPENAI_REALTIME_PATH } from "../schemas/openai-realtime";
import { readSessionRecords } from "../services/realtime-gateway/session-records";
import { atRate, nativeCommitted, openAiCommitted } from "./support/committed-clip";
import { connectRt, fixture, RELAXED_ADMISSION, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * The same speech gives the same words at every client rate (issue 44): jfk.wav, taken
 * by ffmpeg to 24 and 48 kHz as a client would send it, one manually committed item, on
 * the real stack. 16 kHz never meets the gateway's resampler; 24 and 48 kHz go through
 * it (shared/audio/resample.ts) on the native door, 24 kHz on the OpenAI door. With the
 * hand-written filter it replaced, jfk.wav's word error rate went from 0.27 at 16 kHz to
 * 0.73 at 24 kHz (bench/wer.ts).
 */
let stack: Stack;
let key: string;
const JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.";

beforeAll(async () => {
  // the commit path (one transcript per item, the same every run), as test/realtime-resume.test.ts
  stack = await startStack({ RT_STREAM_DECODERS: "0", ...RELAXED_ADMISSION });
  key = (await stack.issueKey("pro", "tenant-rates")).key;
});
afterAll(async () => {
  await stack?.stop();
});

describe("client sample rates", () => {
  it("jfk.wav committed at 16 and 24 kHz (native and OpenAI doors) and 48 kHz (native) gives the 16 kHz words", async () => {
    const jfk = fixture("jfk.wav");
    const at16 = await nativeCommitted(stack.baseUrl, key, jfk, 16000);
    const wer16 = wordErrorRate(JFK, at16);
    // PocketSphinx's own figure on this clip (about 0.27): the plumbing works at all
    expect(wer16.errors / wer16.referenceWords, at16).toBeLessThan(0.4);
    const others = {
      "native 24 kHz": await nativeCommitted(stack.baseUrl, key, jfk, 24000),
      "native 48 kHz": await nativeCommitted(stack.baseUrl, key, jfk, 48000),
      "OpenAI 24 kHz": await openAiCommitted(stack.baseUrl, key, jfk),
    };
    for (const [how, text] of Object.entries(others)) {
      const wer = wordErrorRate(JFK, text);
      // at most one word of 22 from the 16 kHz figure, and at most one word apart from its transcript
      expect(Math.abs(wer.errors - wer16.errors), `${how}: "${text}" vs 16 kHz "${at16}"`).toBeLessThanOrEqual(1);
      expect(wordErrorRate(at16, text).errors, `${how}: "${text}" vs 16 kHz "${at16}"`).toBeLessThanOrEqual(1);
    }
  });

  // The resampler's output trails its input by its latency (2.5 ms), compensated at the
  // start; session.close drains the rest, so the whole stream reaches the VAD (without
  // the drain the item ended at 3998 ms). A manual commit leaves it in the filter: its
  // item ends 2.5 ms before the last sample sent (31 960 samples, 1997.5 ms, told 1998).
  const TWO_SECONDS = () => fixture("jfk.wav").subarray(0, 32000);
  const closedItem = async (c: RtClient) => {
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
    return c.events.filter((e) => e.type === "input_audio_buffer.committed");
  };
  for (const rate of [24000, 48000]) {
    it(`native door, ${rate / 1000} kHz: session.close drains the resampler (2 s then 2 s more end at 4000 ms); a commit does not (1998 ms)`, async () => {
      const c = await connectRt(wsUrl(stack.baseUrl, `sample_rate=${rate}`), { authorization: `Bearer ${key}` });
      await c.next("session.created");
      c.sendJson({ type: "session.update", session: { turn_detection: { type: "manual" } } });
      await c.next("session.updated");
      const pcm = atRate(TWO_SECONDS(), rate);
      expect(pcm.length).toBe(2 * rate);
      await streamPcm(c, pcm, { speed: Infinity, chunkBytes: (rate / 50) * 2 });
      c.sendJson({ type: "input_audio_buffer.commit" });
      await c.next("input_audio_buffer.committed");
      await streamPcm(c, pcm, { speed: Infinity, chunkBytes: (rate / 50) * 2 });
      const [committed, closed] = await closedItem(c);
      expect({ reason: committed.reason, start: committed.audio_start_ms, end: committed.audio_end_ms }).toEqual({ reason: "commit", start: 0, end: 1998 });
      expect({ reason: closed.reason, end: closed.audio_end_ms }).toEqual({ reason: "close", end: 4000 });
    });
  }

  it("OpenAI door (24 kHz audio/pcm): a commit of exactly 100 ms is taken (the resampler's held-back 2.5 ms count); session.close drains the resampler", async () => {
    const c = await connectRt(`${stack.baseUrl.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}`, { authorization: `Bearer ${key}` });
    const created = await c.next("session.created");
    c.sendJson({ type: "session.update", session: { type: "transcription", audio: { input: { turn_detection: null } } } });
    await c.next("session.updated");
    const append = (pcm: Int16Array) => {
      const bytes = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
      for (let at = 0; at < bytes.length; at += 1920) c.sendJson({ type: "input_audio_buffer.append", audio: bytes.subarray(at, at + 1920).toString("base64") });
    };
    const pcm = atRate(TWO_SECONDS(), 24000);
    append(pcm.subarray(0, 2400));
    c.sendJson({ type: "input_audio_buffer.commit" });
    await c.next("input_audio_buffer.committed");
    append(pcm);
    await closedItem(c);
    expect(c.events.filter((e) => e.type === "error")).toEqual([]);
    const stored: { reason: string; end: number }[] = [];
    await readSessionRecords(stack.nats, created.session.id, (r) => (r.type === "rt.server_event" && r.data.type === "input_audio_buffer.committed" && stored.push({ reason: r.data.reason, end: r.data.audio_end_ms }), false), { waitMs: 0 });
    // 100 ms less the 2.5 ms the filter holds: 97.5 ms; then 2 s more, drained at the close
    expect(stored).toEqual([{ reason: "commit", end: 98 }, { reason: "close", end: 2100 }]);
  });
});
