import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { boundaryWindows, chunkCount, planSlices, quietestPoint } from "./slicing";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "../../test/support/fixtures";

const RATE = 16_000;

/** Loud noise everywhere except silent gaps [from, to) in seconds. */
function noiseWithGaps(seconds: number, gaps: [number, number][]): Int16Array {
  const pcm = new Int16Array(seconds * RATE);
  let seed = 7;
  for (let i = 0; i < pcm.length; i++) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    const t = i / RATE;
    const silent = gaps.some(([a, b]) => t >= a && t < b);
    pcm[i] = silent ? 0 : ((seed % 16000) - 8000);
  }
  return pcm;
}

describe("chunk count", () => {
  it("is ceil(duration / segment), a tail under 0.5 s joining the previous chunk", () => {
    expect(chunkCount(60 * RATE, RATE, 10)).toBe(6);
    expect(chunkCount(60.3 * RATE, RATE, 10)).toBe(6);
    expect(chunkCount(61 * RATE, RATE, 10)).toBe(7);
    expect(chunkCount(5 * RATE, RATE, 300)).toBe(1);
    expect(chunkCount(0, RATE, 10)).toBe(1);
  });
});

describe("boundary placement", () => {
  it("cuts in the silent gap nearest each target instead of blindly at k·S", () => {
    const pcm = noiseWithGaps(30, [[11.2, 11.6], [18.5, 18.8]]);
    const slices = planSlices(pcm, RATE, 10);
    expect(slices).toHaveLength(3);
    const cut1 = slices[0]!.endSample / RATE;
    const cut2 = slices[1]!.endSample / RATE;
    expect(cut1).toBeGreaterThanOrEqual(11.2);
    expect(cut1).toBeLessThanOrEqual(11.6);
    expect(cut2).toBeGreaterThanOrEqual(18.5);
    expect(cut2).toBeLessThanOrEqual(18.8);
  });

  it("stays within the search window and prefers the target on flat audio", () => {
    const pcm = new Int16Array(40 * RATE); // all silence: every point ties
    const w = boundaryWindows(pcm.length, RATE, 10)[0]!;
    const cut = quietestPoint(pcm.subarray(w.startSample, w.endSample), w, RATE);
    expect(Math.abs(cut - 10 * RATE)).toBeLessThanOrEqual(0.02 * RATE);
    const far = noiseWithGaps(30, [[14, 15]]); // gap outside the ±2 s window
    const cutFar = planSlices(far, RATE, 10)[0]!.endSample / RATE;
    expect(cutFar).toBeGreaterThanOrEqual(8);
    expect(cutFar).toBeLessThanOrEqual(12);
  });

  it("covers the audio contiguously with absolute offsets", () => {
    const pcm = noiseWithGaps(95, [[29.5, 30.2], [61, 61.4]]);
    const slices = planSlices(pcm, RATE, 30);
    expect(slices.map((s) => s.index)).toEqual([0, 1, 2, 3]);
    expect(slices[0]!.startSample).toBe(0);
    expect(slices.at(-1)!.endSample).toBe(pcm.length);
    for (let i = 1; i < slices.length; i++) expect(slices[i]!.startSample).toBe(slices[i - 1]!.endSample);
  });
});

describe("real speech (silero_test.wav, 60 s)", () => {
  const pcm = pcm16MonoFromWav(readFileSync(fixturePath("silero_test.wav")))!;
  const energyAround = (sample: number) => {
    const half = 0.1 * RATE;
    let sum = 0;
    for (let i = sample - half; i < sample + half; i++) sum += pcm[i]! * pcm[i]!;
    return sum / (2 * half);
  };

  it("gives 6 chunks at segment_seconds 10, each cut quieter than the blind cut", () => {
    const slices = planSlices(pcm, RATE, 10);
    expect(slices).toHaveLength(6);
    for (let k = 1; k < 6; k++) {
      const cut = slices[k - 1]!.endSample;
      expect(Math.abs(cut / RATE - 10 * k)).toBeLessThanOrEqual(2);
      expect(energyAround(cut)).toBeLessThanOrEqual(energyAround(10 * k * RATE));
    }
  });
});
