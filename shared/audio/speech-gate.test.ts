import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { decodeAudio } from "./decode";
import { holdsSpeech } from "./speech-gate";
import { fixturePath } from "../../test/support/fixtures";
import { ffmpegNoise, whiteNoise } from "../../test/support/noise";

const clip = async (name: string) => (await decodeAudio(readFileSync(fixturePath(name)))).pcm;

describe("holdsSpeech", () => {
  it("finds speech in the labelled clips, alone and under white noise at 10 dB", async () => {
    for (const name of ["jfk.wav", "ldc93s1.wav", "silero_test.wav"]) {
      const pcm = await clip(name);
      expect(await holdsSpeech(pcm), name).toBe(true);
      let power = 0;
      for (const v of pcm) power += v * v;
      const rms = Math.sqrt(power / pcm.length);
      // uniform noise of amplitude a has power a²/3: 10 dB under the clip's
      const n = whiteNoise(Math.ceil(pcm.length / 16_000), (rms / Math.sqrt(10)) * Math.sqrt(3));
      const noisy = pcm.map((v, i) => Math.max(-32768, Math.min(32767, v + n[i]!)));
      expect(await holdsSpeech(noisy), `${name} under white noise`).toBe(true);
    }
  });

  it("finds none in digital silence, white noise or background noise", async () => {
    expect(await holdsSpeech(new Int16Array(2 * 16_000)), "silence").toBe(false);
    expect(await holdsSpeech(whiteNoise(10, 3000)), "white").toBe(false);
    expect(await holdsSpeech(whiteNoise(10, 20000)), "loud white").toBe(false);
    expect(await holdsSpeech(ffmpegNoise(30, "brown", 0.05)), "brown").toBe(false);
    expect(await holdsSpeech(ffmpegNoise(30, "pink", 0.05)), "pink").toBe(false);
  });

  it("leaves a clip too short to judge to the engine", async () => {
    expect(await holdsSpeech(new Int16Array(1000))).toBe(true);
  });
});
