import { describe, expect, it } from "vitest";
import { AudioRing, composeFinal, deltaText, newlyStable, splitWords } from "./streaming";

describe("LocalAgreement-2", () => {
  it("emits the common prefix of two consecutive hypotheses after what is out", () => {
    expect(newlyStable(null, ["and", "so"], 0)).toEqual([]);
    expect(newlyStable(["and", "so", "my"], ["and", "so", "my", "fellow"], 0)).toEqual(["and", "so", "my"]);
    expect(newlyStable(["and", "so", "my", "fell"], ["and", "so", "my", "fellow"], 3)).toEqual([]);
    expect(newlyStable(["and", "so", "my", "fellow", "americans"], ["and", "so", "my", "fellow", "american"], 3)).toEqual(["fellow"]);
    // an emitted word the decoder has changed its mind about stays emitted; later words still agree by position
    expect(newlyStable(["and", "sew", "my"], ["and", "so", "my"], 2)).toEqual(["my"]);
  });
  it("deltas concatenate to the final transcript, the emitted prefix standing", () => {
    const w = (word: string, s: number) => ({ word, start_ms: s, end_ms: s + 100, probability: 0.9 });
    const emitted = ["and", "sew"];
    const d1 = deltaText(0, ["and"]);
    const d2 = deltaText(1, ["sew"]);
    const f = composeFinal(emitted, [w("and", 0), w("so", 100), w("my", 200), w("fellow", 300)]);
    expect(d1 + d2 + f.lastDelta).toBe(f.transcript);
    expect(f.transcript).toBe("and sew my fellow");
    expect(f.words.map((x) => x.start_ms)).toEqual([0, 100, 200, 300]);
    expect(composeFinal([], []).lastDelta).toBe("");
    expect(composeFinal(["a", "b"], [w("a", 0)]).transcript).toBe("a b");
    expect(splitWords(" a  b ")).toEqual(["a", "b"]);
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
