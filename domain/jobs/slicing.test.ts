import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { boundaryWindows, chunkCount, effectiveSegmentSeconds, MAX_CHUNKS, planSlices, quietestPoint } from "./slicing";
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

describe("slice cap (at most MAX_CHUNKS slices per job)", () => {
  it("raises the slice length to duration / MAX_CHUNKS on long audio", () => {
    expect(MAX_CHUNKS).toBe(100);
    expect(effectiveSegmentSeconds(1800, 1)).toBe(18);
    expect(effectiveSegmentSeconds(60, 10)).toBe(10);
    expect(chunkCount(1800 * RATE, RATE, 1)).toBe(100);
    expect(chunkCount(4 * 3600 * RATE, RATE, 1)).toBe(100);
    expect(chunkCount(4 * 3600 * RATE, RATE, 300)).toBe(48);
    // under the cap nothing changes: 60 s at 1 s is 60 slices
    expect(chunkCount(60 * RATE, RATE, 1)).toBe(60);
  });

  it("places the capped boundaries at k · duration / MAX_CHUNKS", () => {
    const windows = boundaryWindows(1800 * RATE, RATE, 1);
    expect(windows).toHaveLength(99);
    expect(windows[0]!.targetSample).toBe(18 * RATE);
    expect(windows.at(-1)!.targetSample).toBe(99 * 18 * RATE);
    // the search window follows the used length (min(2 s, S / 4)), not the requested one
    expect(windows[0]!.endSample - windows[0]!.startSample).toBe(4 * RATE);
  });

  it("plans at most MAX_CHUNKS slices for a 1 s segment length on audio longer than 100 s", () => {
    const pcm = noiseWithGaps(250, []);
    const slices = planSlices(pcm, RATE, 1);
    expect(slices).toHaveLength(100);
    expect(slices.at(-1)!.endSample).toBe(pcm.length);
  });
});
