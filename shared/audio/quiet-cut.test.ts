import { describe, expect, it } from "vitest";
import { quietestCut } from "./quiet-cut";

/** A 440 Hz tone of `seconds` at `amplitude`. */
const tone = (seconds: number, amplitude: number) => Int16Array.from({ length: Math.round(seconds * 16000) }, (_, i) => Math.round(amplitude * Math.sin((2 * Math.PI * 440 * i) / 16000)));
const concat = (...parts: Int16Array[]) => {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (out.set(p, at), at + p.length), 0);
  return out;
};

describe("quietestCut", () => {
  it("given speech with a pause in the last 3 s, when the limit comes, then the cut is in the middle of the pause", () => {
    const pcm = concat(tone(5, 8000), tone(0.2, 100), tone(1.5, 8000));
    const cut = quietestCut(pcm, 0, 16000, pcm.length);
    expect(cut).toBeGreaterThanOrEqual(5 * 16000);
    expect(cut).toBeLessThanOrEqual(5.2 * 16000);
    // the buffer may start later on the timeline: the cut moves with it
    expect(quietestCut(pcm, 32000, 48000, pcm.length + 32000)).toBe(cut + 32000);
  });

  it("given a pause earlier than the search reaches, or before the earliest cut, when the limit comes, then that pause is not taken", () => {
    const pcm = concat(tone(1, 8000), tone(0.2, 0), tone(6, 8000));
    const cut = quietestCut(pcm, 0, 16000, pcm.length);
    expect(cut).toBeGreaterThan(pcm.length - 3 * 16000);
    expect(quietestCut(pcm.subarray(0, 1.3 * 16000), 0, 1.25 * 16000, 1.3 * 16000)).toBe(1.3 * 16000);
  });
});
