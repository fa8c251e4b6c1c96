import { describe, expect, it } from "vitest";
import { decideEndOfTurn, EAGERNESS_TIMING, endOfSentenceFromMark, judgeWords, timingOf, withProsody, type PauseHypothesis, type TurnInput } from "./end-of-turn";

/** A hypothesis that heard 90 ms of the pause, its words unchanged for 120 ms. */
const heard = (endOfSentence: number | null, over: Partial<PauseHypothesis> = {}): PauseHypothesis => ({ words: 6, endOfSentence, stableMs: 120, heardMs: 90, ...over });
const COMPLETE = heard(-0.5); // "… for them"
const INCOMPLETE = heard(-2.1); // "… and the"
const BETWEEN = heard(-1.3); // "… is all"

/** given(the words heard).when(silence so far, eagerness).then(decision). */
const given = (hypothesis: PauseHypothesis | null, over: Partial<TurnInput> = {}) => ({
  when: (silenceMs: number, eagerness: TurnInput["eagerness"] = "medium") => ({
    then: (expected: ReturnType<typeof decideEndOfTurn>) => expect(decideEndOfTurn({ silenceMs, eagerness, hypothesis, readPending: false, signalled: false, prosody: "none", ...over })).toEqual(expected),
  }),
});

describe("semantic end of turn: what the words say", () => {
  it("given the language model's end-of-sentence probability, complete at 10% and up, mid-sentence at 2% and under", () => {
    expect(judgeWords(heard(-1))).toBe("complete");
    expect(judgeWords(heard(-1.01))).toBe("uncertain");
    expect(judgeWords(heard(-1.69))).toBe("uncertain");
    expect(judgeWords(heard(-1.7))).toBe("incomplete");
  });
  it("given words still changing, or a hypothesis that has not heard enough of the pause, no verdict either way", () => {
    expect(judgeWords(heard(-0.5, { stableMs: 59 }))).toBe("uncertain");
    expect(judgeWords(heard(-0.5, { stableMs: 60 }))).toBe("complete");
    expect(judgeWords(heard(-2.5, { stableMs: 30 }))).toBe("uncertain");
    expect(judgeWords(heard(-0.5, { heardMs: 59 }))).toBe("uncertain");
    expect(judgeWords(heard(-0.5, { heardMs: 60 }))).toBe("complete");
    expect(judgeWords(heard(-0.5, { heardMs: -200 }))).toBe("uncertain");
  });
  it("given no words, or none the model could score, or no decoder at all: uncertain", () => {
    expect(judgeWords(heard(-0.5, { words: 0 }))).toBe("uncertain");
    expect(judgeWords(heard(null))).toBe("uncertain");
    expect(judgeWords(null)).toBe("uncertain");
  });
});

describe("semantic end of turn: when to commit (medium)", () => {
  it("given complete, stable words, commits after 240 ms of silence, not before", () => {
    given(COMPLETE).when(240).then({ kind: "commit", words: "complete" });
    given(COMPLETE, { signalled: true }).when(239).then({ kind: "wait" });
  });
  it("given words that look mid-sentence, waits through pauses server_vad would cut, up to 1.2 s", () => {
    given(INCOMPLETE, { signalled: true }).when(1199).then({ kind: "wait" });
    given(INCOMPLETE).when(1200).then({ kind: "commit", words: "incomplete" });
  });
  it("given words in between, or no decoder (silence only), commits at server_vad's default 500 ms", () => {
    given(BETWEEN, { signalled: true }).when(499).then({ kind: "wait" });
    given(BETWEEN).when(500).then({ kind: "commit", words: "uncertain" });
    given(null).when(500).then({ kind: "commit", words: "uncertain" });
  });
  it("given a read of the pause on its way and none that heard enough of it, waits for it, but never past the bound", () => {
    given(heard(-0.5, { heardMs: -100 }), { readPending: true }).when(900).then({ kind: "wait" });
    given(heard(-0.5, { heardMs: 59 }), { readPending: true }).when(900).then({ kind: "wait" });
    given(null, { readPending: true }).when(1200).then({ kind: "commit", words: "uncertain" });
    // what has heard the pause already is judged, whatever is on its way
    given(COMPLETE, { readPending: true }).when(240).then({ kind: "commit", words: "complete" });
    given(INCOMPLETE, { readPending: true }).when(1200).then({ kind: "commit", words: "incomplete" });
  });
});

describe("semantic end of turn: eagerness", () => {
  it("given eagerness, the waits in ms: high 100/150/300/800, medium 160/240/500/1200, low 250/350/800/2000; auto is medium", () => {
    expect(EAGERNESS_TIMING).toEqual({
      high: { certainMs: 100, completeMs: 150, uncertainMs: 300, maxMs: 800 },
      medium: { certainMs: 160, completeMs: 240, uncertainMs: 500, maxMs: 1200 },
      low: { certainMs: 250, completeMs: 350, uncertainMs: 800, maxMs: 2000 },
    });
    expect(timingOf("auto")).toEqual(EAGERNESS_TIMING.medium);
  });
  it("given the same words and silence, high commits where medium and low still wait", () => {
    given(COMPLETE, { signalled: true }).when(200, "high").then({ kind: "commit", words: "complete" });
    given(COMPLETE, { signalled: true }).when(200, "medium").then({ kind: "wait" });
    given(BETWEEN, { signalled: true }).when(600, "low").then({ kind: "wait" });
    given(BETWEEN).when(600, "auto").then({ kind: "commit", words: "uncertain" });
    given(INCOMPLETE).when(800, "high").then({ kind: "commit", words: "incomplete" });
    given(INCOMPLETE, { signalled: true }).when(1999, "low").then({ kind: "wait" });
    given(INCOMPLETE).when(2000, "low").then({ kind: "commit", words: "incomplete" });
  });
});

describe("semantic end of turn: the early signal", () => {
  it("given complete words, the turn may be over as soon as they are judged, before the commit", () => {
    given(COMPLETE).when(90).then({ kind: "maybe_over", words: "complete" });
  });
  it("given words in between, at the silence complete words would have committed; mid-sentence, at the uncertain one", () => {
    given(BETWEEN).when(239).then({ kind: "wait" });
    given(BETWEEN).when(240).then({ kind: "maybe_over", words: "uncertain" });
    given(INCOMPLETE).when(499).then({ kind: "wait" });
    given(INCOMPLETE).when(500).then({ kind: "maybe_over", words: "incomplete" });
  });
  it("given the signal already given for this pause, not again", () => {
    given(BETWEEN, { signalled: true }).when(300).then({ kind: "wait" });
  });
  it("given the words not heard yet, no signal either", () => {
    given(null, { readPending: true }).when(400).then({ kind: "wait" });
  });
});

describe("semantic end of turn: the pitch before the pause", () => {
  it("given a fall to the speaker's low, the words' verdict moves one step toward complete; a pitch held high, one step toward mid-sentence", () => {
    expect(withProsody("uncertain", "falling")).toBe("complete");
    expect(withProsody("incomplete", "falling")).toBe("uncertain");
    expect(withProsody("complete", "falling")).toBe("certain");
    expect(withProsody("certain", "falling")).toBe("certain");
    expect(withProsody("complete", "continuing")).toBe("uncertain");
    expect(withProsody("uncertain", "continuing")).toBe("incomplete");
    expect(withProsody("incomplete", "continuing")).toBe("incomplete");
    for (const w of ["complete", "uncertain", "incomplete"] as const) expect(withProsody(w, "none")).toBe(w);
  });
  it("given words that look complete and a fall to the speaker's low, both cues agree: commits after the shortest silence (medium 160 ms)", () => {
    given(COMPLETE, { prosody: "falling" }).when(90).then({ kind: "maybe_over", words: "certain" });
    given(COMPLETE, { prosody: "falling", signalled: true }).when(159).then({ kind: "wait" });
    given(COMPLETE, { prosody: "falling" }).when(160).then({ kind: "commit", words: "certain" });
    given(COMPLETE, { prosody: "falling" }).when(100, "high").then({ kind: "commit", words: "certain" });
    // no reading of the pitch: the words alone, 240 ms
    given(COMPLETE, { signalled: true }).when(160).then({ kind: "wait" });
  });
  it("given misheard words in between and a falling pitch, commits after the short silence (medium 240 ms)", () => {
    given(BETWEEN, { prosody: "falling", signalled: true }).when(239).then({ kind: "wait" });
    given(BETWEEN, { prosody: "falling" }).when(240).then({ kind: "commit", words: "complete" });
  });
  it("given words that look complete but a pitch held high (a comma: '… young man,'), waits as for uncertain words", () => {
    given(COMPLETE, { prosody: "continuing", signalled: true }).when(499).then({ kind: "wait" });
    given(COMPLETE, { prosody: "continuing" }).when(500).then({ kind: "commit", words: "uncertain" });
  });
  it("given words that look mid-sentence, a fall alone does not make them complete: uncertain, 500 ms", () => {
    given(INCOMPLETE, { prosody: "falling", signalled: true }).when(499).then({ kind: "wait" });
    given(INCOMPLETE, { prosody: "falling" }).when(500).then({ kind: "commit", words: "uncertain" });
  });
  it("given no decoder for the item (commit path), the pitch alone moves the silence-only wait", () => {
    given(null, { prosody: "falling" }).when(240).then({ kind: "commit", words: "complete" });
    // a gap between syllables is no verdict: the pitch counts once the pause has lasted 60 ms
    given(null, { prosody: "falling" }).when(30).then({ kind: "wait" });
    given(null, { prosody: "falling" }).when(60).then({ kind: "maybe_over", words: "complete" });
    given(null, { prosody: "continuing", signalled: true }).when(1199).then({ kind: "wait" });
  });
  it("given a falling pitch but words that have not heard the pause, no verdict from the pitch yet (no early signal on pitch alone)", () => {
    given(null, { prosody: "falling", readPending: true }).when(600).then({ kind: "wait" });
    given(heard(-1.3, { heardMs: 30 }), { prosody: "falling" }).when(30).then({ kind: "wait" });
    given(heard(-1.3, { heardMs: 30 }), { prosody: "falling" }).when(240).then({ kind: "maybe_over", words: "uncertain" });
    given(heard(-1.3, { heardMs: 60 }), { prosody: "falling" }).when(60).then({ kind: "maybe_over", words: "complete" });
  });
  it("given a pitch held high, the early signal comes where uncertain words would have committed", () => {
    given(COMPLETE, { prosody: "continuing" }).when(239).then({ kind: "wait" });
    given(COMPLETE, { prosody: "continuing" }).when(240).then({ kind: "maybe_over", words: "uncertain" });
  });
});

describe("semantic end of turn: punctuated words without a language model (whisper.cpp, an upstream)", () => {
  it("a sentence mark reads complete, a comma, colon, semicolon or dash mid-sentence, no mark no verdict", () => {
    const judged = (last: string) => judgeWords({ words: 3, endOfSentence: endOfSentenceFromMark(last), stableMs: 200, heardMs: 200 });
    for (const w of ["country.", "you?", "now!", 'said."']) expect(judged(w)).toBe("complete");
    for (const w of ["Americans,", "this:", "so;", "and\u2014"]) expect(judged(w)).toBe("incomplete");
    for (const w of ["country", "you"]) expect(judged(w)).toBe("uncertain");
    expect(endOfSentenceFromMark(undefined)).toBeNull();
  });
});
