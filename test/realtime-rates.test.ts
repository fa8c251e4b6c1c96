import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wordErrorRate } from "../shared/workers/wer";
import { nativeCommitted, openAiCommitted } from "./support/committed-clip";
import { fixture, RELAXED_ADMISSION } from "./support/realtime-support";
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
});
