import { describe, expect, it } from "vitest";
import { alignPrefix, AudioRing, composeFinal, deltaForms, deltaText, newlyStable, singleWordTerms } from "./streaming";

const out = (...words: string[]) => words.map((word) => ({ word, form: word }));

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
    const f = composeFinal(out(...emitted), [w("and", 0), w("so", 100), w("my", 200), w("fellow", 300)]);
    expect(d1 + d2 + f.lastDelta).toBe(f.transcript);
    expect(f.transcript).toBe("and sew my fellow");
    expect(f.words.map((x) => x.start_ms)).toEqual([0, 100, 200, 300]);
    expect(composeFinal([], []).lastDelta).toBe("");
    expect(composeFinal(out("a", "b"), [w("a", 0)]).transcript).toBe("a b");
    // emitted words the final has nothing for stay on the item's timeline
    expect(composeFinal(out("a"), [], 500).words[0]).toMatchObject({ word: "a", start_ms: 500, end_ms: 500 });
  });
  it("aligns by words, not positions, when the final split or merged words the prefix holds", () => {
    // the final heard two words where one was emitted: the rest is not shifted into a repeat
    const split = composeFinal(out("he", "was", "not", "until", "disclosed", "young"), ["he", "was", "not", "until", "this", "blows", "young", "man"].map((x, i) => w(x, i * 100)));
    expect(split.transcript).toBe("he was not until disclosed young man");
    expect(split.lastDelta).toBe(" man");
    expect(split.words.at(-2)).toMatchObject({ word: "young", start_ms: 600 });
    // the final merged two emitted words into one: nothing after them is dropped
    const merged = composeFinal(out("in", "we'll", "pull"), ["in", "wheel", "pull", "him", "self"].map((x, i) => w(x, i * 100)));
    expect(merged.transcript).toBe("in we'll pull him self");
    expect(alignPrefix(["a", "b", "c"], ["a", "x", "c", "d"])).toEqual({ end: 3, pairs: [0, 1, 2] });
    expect(alignPrefix(["a", "b"], ["a"])).toEqual({ end: 1, pairs: [0, undefined] });
  });
});

describe("formatting a streamed item", () => {
  const w = (word: string, s: number) => ({ word, start_ms: s, end_ms: s + 100, probability: 0.9 });
  it("deltas get casing only: the item's first word, I, single-word terms", () => {
    const terms = singleWordTerms(["JFK", "New York"]);
    expect(deltaForms(0, ["i", "met", "jfk", "twenty"], terms)).toEqual(["I", "met", "JFK", "twenty"]);
    expect(deltaForms(2, ["and", "i'm"], terms)).toEqual(["and", "I'm"]);
    expect(terms.has("new york")).toBe(false);
  });
  it("the final keeps what was shown, formats the rest, and closes the sentence even when every word was out", () => {
    // a formatter standing in for smart format: capital first word, "twenty five" → "25", a full stop
    const format = (ws: readonly { word: string }[]) => {
      const forms = ws.map((x) => x.word);
      const i = forms.indexOf("twenty");
      if (i >= 0 && forms[i + 1] === "five") forms.splice(i, 2, "25", "");
      forms[0] = forms[0]!.charAt(0).toUpperCase() + forms[0]!.slice(1);
      const last = forms.findLastIndex(Boolean);
      forms[last] += ".";
      return forms;
    };
    const emitted = [{ word: "it", form: "It" }, { word: "costs", form: "costs" }];
    const f = composeFinal(emitted, ["it", "costs", "twenty", "five"].map((x, i) => w(x, i * 100)), 0, format);
    expect(f.lastDelta).toBe(" 25.");
    expect(f.transcript).toBe("It costs 25.");
    expect(f.words.map((x) => x.punctuated_word)).toEqual(["It", "costs", "25.", ""]);
    expect(f.words.map((x) => x.word)).toEqual(["it", "costs", "twenty", "five"]);
    // a merge reaching back into the emitted words: the rest shows itself rather than nothing
    const across = composeFinal([{ word: "twenty", form: "twenty" }], ["twenty", "five"].map((x, i) => w(x, i * 100)), 0, format);
    expect(across.transcript).toBe("twenty five.");
    expect(across.lastDelta).toBe(" five.");
    const all = composeFinal(emitted, ["it", "costs"].map((x, i) => w(x, i * 100)), 0, format);
    expect(all.lastDelta).toBe(".");
    expect(all.transcript).toBe("It costs.");
    expect(all.words.at(-1)!.punctuated_word).toBe("costs.");
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
