import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { createFrameClassifier } from "../../shared/audio/vad-frames";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "../../test/support/fixtures";
import { telephone } from "../../test/support/telephone";
import { emptyDiarization, itemFrames, labelItemTurns, restoredDiarization, savedDiarization, type OnlineBounds, type OnlineDiarization, type SpeakerFold } from "./online";

const clip = (name: string) => pcm16MonoFromWav(readFileSync(fixturePath(name)))!;
const A = clip("silero_test.wav");
const B = clip("jfk.wav");
const cut = (pcm: Int16Array, from: number, to: number) => pcm.subarray(from * 16_000, to * 16_000);

async function label(items: Int16Array[], bounds: OnlineBounds = {}): Promise<{ speakers: (number | null)[]; merged: SpeakerFold[][]; state: OnlineDiarization }> {
  let state = emptyDiarization();
  const speakers: (number | null)[] = [];
  const merged: SpeakerFold[][] = [];
  for (const pcm of items) {
    const vad = await createFrameClassifier(2);
    const r = labelItemTurns(state, itemFrames(pcm, vad.classify(pcm)), bounds);
    vad.free();
    state = r.state;
    speakers.push(r.speaker);
    merged.push(r.merged);
  }
  return { speakers, merged, state };
}

describe("live speaker labels, one item at a time", () => {
  it("given items of two people taking turns, when each is labelled, then each person keeps the label of their first item", async () => {
    const { speakers, state } = await label([cut(A, 0, 6), cut(B, 0, 5), cut(A, 6, 12), cut(B, 5, 11), cut(A, 12, 18)]);
    expect(speakers).toEqual([0, 1, 0, 1, 0]);
    expect(state.speakers).toHaveLength(2);
  });

  it("given one person first through a microphone, then through a telephone, then the microphone again, when the third item bridges the two, then the telephone's label is folded into the first, said once", async () => {
    // JFK at 0-4 s, through a telephone band at 4-8 s (a new label: the channel differs
    // more than the penalty allows), at 8-11 s as recorded: that item joins speaker 0,
    // whose Gaussian then covers both channels closely enough to take speaker 1 in
    const { speakers, merged, state } = await label([cut(B, 0, 4), telephone(cut(B, 4, 8)), cut(B, 8, 11), telephone(cut(B, 0, 4)), cut(B, 4, 8)]);
    expect(speakers).toEqual([0, 1, 0, 0, 0]);
    expect(merged).toEqual([[], [], [{ from: 1, into: 0 }], [], []]);
    expect(state.mergedInto).toEqual({ 1: 0 });
  });

  it("given max_speakers 1, then every item is the one speaker", async () => {
    const { speakers } = await label([cut(A, 0, 6), cut(B, 0, 5), cut(A, 6, 12)], { maxSpeakers: 1 });
    expect(speakers).toEqual([0, 0, 0]);
  });

  it("given an item with under a second of speech, then it goes to the speaker it fits and teaches nothing", async () => {
    const before = await label([cut(A, 0, 6), cut(B, 0, 5)]);
    const frames = before.state.speakers.map((s) => s.stats.n);
    const vad = await createFrameClassifier(2);
    const short = cut(B, 6, 6.6);
    const r = labelItemTurns(before.state, itemFrames(short, vad.classify(short)));
    vad.free();
    expect(r.speaker).not.toBeNull();
    expect(r.state.speakers.map((s) => s.stats.n)).toEqual(frames);
  });

  it("given an item in which the speaker changes, then it has a run per speaker, the later one starting where the second voice does", async () => {
    const { state } = await label([cut(A, 0, 6), cut(B, 0, 5)]);
    const both = new Int16Array(16_000 * 8);
    both.set(cut(A, 20, 24), 0);
    both.set(cut(B, 6, 10), 4 * 16_000);
    const vad = await createFrameClassifier(2);
    const r = labelItemTurns(state, itemFrames(both, vad.classify(both)));
    vad.free();
    expect(r.turns.map((t) => t.speaker)).toEqual([0, 1]);
    expect(r.turns[1]!.start).toBeGreaterThan(3.5);
    expect(r.turns[1]!.start).toBeLessThan(4.6);
  });

  it("given the speakers kept as JSON and restored (a takeover), then the next items get the labels the original state would give", async () => {
    const { state } = await label([cut(A, 0, 6), cut(B, 0, 5), cut(A, 6, 12)]);
    const restored = restoredDiarization(JSON.parse(JSON.stringify(savedDiarization(state))))!;
    expect(restored).toEqual(state);
    const vad = await createFrameClassifier(2);
    const next = (st: OnlineDiarization, pcm: Int16Array) => labelItemTurns(st, itemFrames(pcm, vad.classify(pcm))).speaker;
    expect(next(restored, cut(B, 5, 11))).toBe(1);
    expect(next(restored, cut(B, 5, 11))).toBe(next(state, cut(B, 5, 11)));
    expect(restoredDiarization({ speakers: "no" })).toBeNull();
    expect(restoredDiarization(null)).toBeNull();
    // sums of products that do not match the sums' dimensions
    expect(restoredDiarization({ speakers: [{ id: 0, n: 5, sum: [1, 2], outer: [1] }], mergedInto: {}, frames: 5 })).toBeNull();
    expect(restoredDiarization({ speakers: [], mergedInto: { 1: "x" }, frames: 5 })).toBeNull();
    // kept by a VAD from before the within-run scatter: restored without it, which the next run of a second or more starts
    const older = restoredDiarization({ ...(savedDiarization(state) as object), within: undefined })!;
    expect(older.within).toBeNull();
    expect(older.speakers).toEqual(state.speakers);
    expect(next(older, cut(B, 5, 11))).toBe(1);
    // a scatter that is not the speakers' dims × dims
    expect(restoredDiarization({ ...(savedDiarization(state) as object), within: { df: 10, scatter: [1, 2, 3] } })).toBeNull();
    vad.free();
  });
});
