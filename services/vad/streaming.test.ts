import { describe, expect, it } from "vitest";
import { AudioRing, newlyStable } from "./streaming";

/** Hypothesis words ending 10 frames apart. */
const hyp = (...words: string[]) => words.map((word, i) => ({ word, endFrame: 10 * (i + 1) }));

describe("LocalAgreement-2 with a settle lag", () => {
  it("emits the common prefix of two consecutive hypotheses after what is out", () => {
    expect(newlyStable(null, hyp("and", "so"), 0, 1000)).toEqual([]);
    expect(newlyStable(["and", "so", "my"], hyp("and", "so", "my", "fellow"), 0, 1000)).toEqual(["and", "so", "my"]);
    expect(newlyStable(["and", "so", "my", "fell"], hyp("and", "so", "my", "fellow"), 3, 1000)).toEqual([]);
    expect(newlyStable(["and", "so", "my", "fellow", "americans"], hyp("and", "so", "my", "fellow", "american"), 3, 1000)).toEqual(["fellow"]);
    // an emitted word the decoder has changed its mind about stays emitted; later words still agree by position
    expect(newlyStable(["and", "sew", "my"], hyp("and", "so", "my"), 2, 1000)).toEqual(["my"]);
  });
  it("holds back agreed words that end within the settle lag of the decoded audio", () => {
    // "so" ends at frame 20, "my" at 30: with audio settled up to frame 25 only "and so" may go
    expect(newlyStable(["and", "so", "my"], hyp("and", "so", "my"), 0, 25)).toEqual(["and", "so"]);
    expect(newlyStable(["and", "so", "my"], hyp("and", "so", "my"), 0, 5)).toEqual([]);
  });
});

describe("AudioRing", () => {
  it("keeps the last samples by timeline position, skips repeats, resets on a gap", () => {
    const r = new AudioRing(4);
    r.append(Int16Array.from([1, 2, 3]), 0);
    r.append(Int16Array.from([3, 4, 5]), 2); // overlaps one sample
    expect(r.end).toBe(5);
    expect([...r.slice(0)]).toEqual([2, 3, 4, 5]);
    expect([...r.slice(3, 5)]).toEqual([4, 5]);
    r.append(Int16Array.from([9]), 10);
    expect(r.start).toBe(10);
    expect([...r.slice(0)]).toEqual([9]);
  });
});
