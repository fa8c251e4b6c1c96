import { describe, expect, it } from "vitest";
import { alignPrefix, AudioRing, composeFinal, deltaText, newlyStable } from "./streaming";

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

describe("the final composed with the emitted prefix", () => {
  const w = (word: string, s: number) => ({ word, start_ms: s, end_ms: s + 100, probability: 0.9 });
  it("keeps the emitted words, and deltas concatenate to the final transcript", () => {
    const emitted = ["and", "sew"];
    const d1 = deltaText(0, ["and"]);
    const d2 = deltaText(1, ["sew"]);
    const f = composeFinal(emitted, [w("and", 0), w("so", 100), w("my", 200), w("fellow", 300)]);
    expect(d1 + d2 + f.lastDelta).toBe(f.transcript);
    expect(f.transcript).toBe("and sew my fellow");
    expect(f.words.map((x) => x.start_ms)).toEqual([0, 100, 200, 300]);
    expect(composeFinal([], []).lastDelta).toBe("");
    expect(composeFinal(["a", "b"], [w("a", 0)]).transcript).toBe("a b");
    // emitted words the final has nothing for stay on the item's timeline
    expect(composeFinal(["a"], [], 500).words[0]).toMatchObject({ word: "a", start_ms: 500, end_ms: 500 });
  });
  it("aligns by words, not positions, when the final split or merged words the prefix holds", () => {
    // the final heard two words where one was emitted: the rest is not shifted into a repeat
    const split = composeFinal(["he", "was", "not", "until", "disclosed", "young"], ["he", "was", "not", "until", "this", "blows", "young", "man"].map((x, i) => w(x, i * 100)));
    expect(split.transcript).toBe("he was not until disclosed young man");
    expect(split.lastDelta).toBe(" man");
    expect(split.words.at(-2)).toMatchObject({ word: "young", start_ms: 600 });
    // the final merged two emitted words into one: nothing after them is dropped
    const merged = composeFinal(["in", "we'll", "pull"], ["in", "wheel", "pull", "him", "self"].map((x, i) => w(x, i * 100)));
    expect(merged.transcript).toBe("in we'll pull him self");
    expect(alignPrefix(["a", "b", "c"], ["a", "x", "c", "d"])).toEqual({ end: 3, pairs: [0, 1, 2] });
    expect(alignPrefix(["a", "b"], ["a"])).toEqual({ end: 1, pairs: [0, undefined] });
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
