import { describe, expect, it } from "vitest";
import { diarizationErrorRate } from "./der";

const ref = [
  { start: 0, end: 10, speaker: "ann" },
  { start: 10, end: 20, speaker: "bob" },
];

describe("diarization error rate (10 ms grid, collar around reference boundaries, best one-to-one mapping)", () => {
  it("is 0 for the reference itself under other names", () => {
    const s = diarizationErrorRate(ref, [
      { start: 0, end: 10, speaker: 7 },
      { start: 10, end: 20, speaker: 3 },
    ]);
    expect(s.der).toBe(0);
    expect([...s.mapping]).toEqual([
      ["7", "ann"],
      ["3", "bob"],
    ]);
  });

  it("counts missed speech, false alarm and confusion, outside the collar", () => {
    // hypothesis: ann until 8 (2 s missed), bob from 10 to 16, then ann again until 22 (4 s confusion, 2 s false alarm)
    const s = diarizationErrorRate(ref, [
      { start: 0, end: 8, speaker: "A" },
      { start: 10, end: 16, speaker: "B" },
      { start: 16, end: 22, speaker: "A" },
    ], 0);
    expect(s.scored).toBeCloseTo(20, 5);
    expect(s.missed).toBeCloseTo(2, 5);
    expect(s.confusion).toBeCloseTo(4, 5);
    expect(s.falseAlarm).toBeCloseTo(2, 5);
    expect(s.der).toBeCloseTo(8 / 20, 5);
  });

  it("does not score within the collar of a reference boundary", () => {
    const late = [
      { start: 0.2, end: 10.2, speaker: "A" },
      { start: 10.2, end: 19.8, speaker: "B" },
    ];
    expect(diarizationErrorRate(ref, late, 0.25).der).toBe(0);
    expect(diarizationErrorRate(ref, late, 0).der).toBeGreaterThan(0);
  });

  it("maps at most one hypothesis speaker to each reference speaker: a split speaker is half confused", () => {
    const s = diarizationErrorRate([{ start: 0, end: 10, speaker: "ann" }], [
      { start: 0, end: 6, speaker: 0 },
      { start: 6, end: 10, speaker: 1 },
    ], 0);
    expect(s.confusion).toBeCloseTo(4, 5);
    expect(s.mapping.get("0")).toBe("ann");
  });
});
