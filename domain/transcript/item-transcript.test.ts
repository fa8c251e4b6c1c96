import { describe, expect, it } from "vitest";
import { alignPrefix, completeCommittedItem, completeItemAfterDeltas, completeStreamedItem, composeFinal, deltaText, streamedDelta, type EmittedWord } from "./item-transcript";
import { transcriptPipeline, type TranscriptPipeline } from "./pipeline";
import { deltaForms, singleWordTerms } from "./smart-format-stage";
import type { TranscriptStage } from "./stage";

const out = (...words: string[]) => words.map((word) => ({ word, form: word }));

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
      return forms.map((form, j) => ({ word: ws[j]!.word, form }));
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


describe("a realtime item through the pipeline: deltas only append", () => {
  const timed = (text: string, from = 1000) => text.split(" ").map((word, i) => ({ word, start_ms: from + i * 300, end_ms: from + i * 300 + 250, probability: 0.9 }));
  /** Streams `batches` of stable words, then completes the item with the decoder's final words. */
  function stream(pipeline: TranscriptPipeline, batches: string[][], final: string) {
    const emitted: EmittedWord[] = [];
    const deltas: string[] = [];
    for (const fresh of batches) {
      const d = streamedDelta(pipeline, emitted, fresh);
      deltas.push(d.delta);
      emitted.push(...d.words);
    }
    const item = completeStreamedItem(pipeline, emitted, timed(final), 1000);
    return { deltas: [...deltas, item.lastDelta], item };
  }
  /** Every delta only appends: what was sent before it is a prefix of the transcript, never rewritten. */
  const appendsOnly = (deltas: string[], transcript: string) => deltas.every((_, i) => transcript.startsWith(deltas.slice(0, i + 1).join("")));

  it("casing only mid-utterance, numerals and the closing mark at the final", () => {
    const { deltas, item } = stream(transcriptPipeline({ prompt: "Flights from JFK" }), [["i", "met", "jfk"], ["at", "three"]], "i met jfk at three thirty p m");
    expect(deltas).toEqual(["I met JFK", " at three", " thirty p.m."]);
    expect(item.transcript).toBe("I met JFK at three thirty p.m.");
    expect(deltas.join("")).toBe(item.transcript);
    expect(appendsOnly(deltas, item.transcript)).toBe(true);
    expect(item.words.map((w) => w.punctuated_word)).toEqual(["I", "met", "JFK", "at", "three", "thirty", "p.m.", ""]);
    const costs = stream(transcriptPipeline({}), [["it", "costs"]], "it costs twenty five dollars");
    expect(costs.deltas).toEqual(["It costs", " $25."]);
    expect(costs.item.words.map((w) => w.start_ms)).toEqual([1000, 1300, 1600, 1900, 2200]);
  });

  it("with no stage (smart format off) the words go out as recognised and carry no punctuated_word", () => {
    const { deltas, item } = stream(transcriptPipeline({ smartFormat: false }), [["i", "met"]], "i met jfk");
    expect(deltas).toEqual(["i met", " jfk"]);
    expect(item.transcript).toBe("i met jfk");
    expect(item.words.every((w) => w.punctuated_word === undefined)).toBe(true);
  });

  it("holds every stage to the rule: a later stage's streamed forms stand at the final", () => {
    // a stand-in for a later stage (redaction): number words are masked as soon as they go out
    const redactNumbers: TranscriptStage = {
      name: "redact_numbers",
      shape: (ws) => ws.map((w) => ({ ...w, form: w.form.replace(/[$€]?\d+(?:[,.:]\d+)*/, "[number]") })),
      shapeStreamed: (ws) => ws.map((w) => (/^(five|twenty)$/.test(w.word) ? { ...w, form: "[number]" } : w)),
    };
    const pipeline: TranscriptPipeline = { stages: [...transcriptPipeline({}).stages, redactNumbers] };
    const { deltas, item } = stream(pipeline, [["it", "costs", "five"]], "it costs five dollars");
    // "five" went out as "[number]"; the final ("It costs [number]." shaped whole) does not rewrite it and adds the rest
    expect(deltas).toEqual(["It costs [number]", " dollars."]);
    expect(item.transcript).toBe("It costs [number] dollars.");
    expect(appendsOnly(deltas, item.transcript)).toBe(true);
    expect(item.words.map((w) => w.punctuated_word)).toEqual(["It", "costs", "[number]", "dollars."]);
  });

  it("a committed utterance transcribed whole: one delta, the whole transcript, times on the session timeline", () => {
    const result = {
      task: "transcribe" as const,
      language: "en",
      duration: 1,
      text: " do you take jfk",
      segments: [{ id: 0, seek: 0, start: 0, end: 1.2, text: " do you take jfk", tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 }],
      words: ["do", "you", "take", "jfk"].map((word, i) => ({ word, start: i * 0.3, end: i * 0.3 + 0.25 })),
    };
    const item = completeCommittedItem(transcriptPipeline({ prompt: "JFK" }), result, 5000);
    expect(item).toMatchObject({ transcript: "Do you take JFK?", lastDelta: "Do you take JFK?", language: "en" });
    expect(item.words[3]).toEqual({ word: "jfk", start_ms: 5900, end_ms: 6150, probability: undefined, punctuated_word: "JFK?" });
    const off = completeCommittedItem(transcriptPipeline({ smartFormat: false }), result, 0);
    expect(off).toMatchObject({ transcript: "do you take jfk", lastDelta: "do you take jfk" });
    expect("punctuated_word" in off.words[0]!).toBe(false);
  });
});

describe("an item re-decoded while spoken, transcribed whole at its commit", () => {
  const result = (words: [string, number, number][]) => ({
    task: "transcribe" as const,
    language: "en",
    duration: 3,
    text: words.map((x) => x[0]).join(" "),
    segments: [],
    words: words.map(([word, start, end]) => ({ word, start, end })),
  });
  const pipeline = transcriptPipeline({ engineFormatted: true });

  it("keeps the words its deltas sent and carries the rest in the last delta, timed on the session's timeline", () => {
    const emitted: EmittedWord[] = [
      { word: "And", form: "And" },
      { word: "so", form: "so" },
    ];
    const item = completeItemAfterDeltas(pipeline, emitted, result([["And", 0.3, 0.6], ["so", 0.6, 0.9], ["my", 0.9, 1.2], ["fellow", 1.2, 1.6], ["Americans,", 1.6, 2.1]]), 1000);
    expect(item.transcript).toBe("And so my fellow Americans,");
    expect(item.lastDelta).toBe(" my fellow Americans,");
    expect("And so" + item.lastDelta).toBe(item.transcript);
    expect(item.language).toBe("en");
    expect(item.words.map((w) => [w.word, w.start_ms, w.end_ms])).toEqual([["And", 1300, 1600], ["so", 1600, 1900], ["my", 1900, 2200], ["fellow", 2200, 2600], ["Americans,", 2600, 3100]]);
  });

  it("a word the final revised stands as sent (a delta is never taken back)", () => {
    const item = completeItemAfterDeltas(pipeline, [{ word: "ask", form: "ask" }], result([["Ask", 0, 0.5], ["not.", 0.5, 1]]), 0);
    expect(item.transcript).toBe("ask not.");
    expect(item.lastDelta).toBe(" not.");
  });

  it("nothing sent: the commit path's one delta", () => {
    const item = completeItemAfterDeltas(pipeline, undefined, result([["Ask", 0, 0.5], ["not.", 0.5, 1]]), 0);
    expect(item.lastDelta).toBe(item.transcript);
    expect(item.transcript).toBe("Ask not.");
  });
});
