import { describe, expect, it } from "vitest";
import type { PitchFrame } from "../../shared/audio/pitch";
import { judgeProsody, pauseProsody } from "./prosody";

/** Pitch frames every 10 ms ending at `pauseAt` (16 kHz samples), with F0 from `hz(i)` (null: unvoiced). */
function frames(pauseAt: number, hz: (i: number) => number | null, count = 150): PitchFrame[] {
  return Array.from({ length: count }, (_, i) => ({ atSample: pauseAt - (count - i) * 160, f0: hz(i), db: -20 - i * 0.05 }));
}
const pauseAt = 16000 * 2;

describe("prosody before a pause", () => {
  it("given a speaker around 150 Hz who ends at 120 Hz, reads the final pitch 3.9 semitones under the median: falling", () => {
    const p = pauseProsody(frames(pauseAt, (i) => (i < 140 ? 150 : 120)), pauseAt);
    expect(p.finalHz).toBe(120);
    expect(p.levelSt).toBeCloseTo(-3.86, 1);
    expect(p.percentile).toBeCloseTo(10 / 150, 2);
    expect(judgeProsody(p)).toBe("falling");
  });
  it("given a final pitch held 3 semitones over the median (a comma), continuing; within ±2 semitones, nothing", () => {
    expect(judgeProsody(pauseProsody(frames(pauseAt, (i) => (i < 120 ? 150 : 180)), pauseAt))).toBe("continuing");
    expect(judgeProsody(pauseProsody(frames(pauseAt, (i) => (i < 140 ? 150 : 160)), pauseAt))).toBe("none");
    expect(judgeProsody(pauseProsody(frames(pauseAt, (i) => (i < 140 ? 150 : 135)), pauseAt))).toBe("none");
  });
  it("given a glide over the last 250 ms, its slope in semitones per second", () => {
    // 150 Hz, then 25 frames falling one semitone every 50 ms (-20 st/s)
    const p = pauseProsody(frames(pauseAt, (i) => (i < 125 ? 150 : 150 * 2 ** (-(i - 125) / 60))), pauseAt);
    expect(p.slopeStPerS).toBeCloseTo(-20, 0);
    expect(p.fallSt).toBeCloseTo(-4.6, 1); // the median of the last three frames: 23 steps of 0.2 st down
  });
  it("given fewer than three pitched frames in the last 400 ms, or none, no reading", () => {
    expect(judgeProsody(pauseProsody(frames(pauseAt, (i) => (i < 100 || i === 148 ? 150 : null)), pauseAt))).toBe("none");
    const unvoiced = pauseProsody(frames(pauseAt, () => null), pauseAt);
    expect(unvoiced).toMatchObject({ voicedFrames: 0, finalHz: null, levelSt: null });
    expect(judgeProsody(unvoiced)).toBe("none");
    expect(unvoiced.energySlopeDbPerS).toBeCloseTo(-5, 1);
  });
  it("given frames after the pause began, ignores them", () => {
    const before = frames(pauseAt, (i) => (i < 140 ? 150 : 120));
    const after = [...before, { atSample: pauseAt + 160, f0: 300, db: -10 }];
    expect(pauseProsody(after, pauseAt).finalHz).toBe(120);
  });
});
