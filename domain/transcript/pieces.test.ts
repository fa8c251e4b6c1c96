import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import type { VerboseTranscription } from "../../schemas/transcription";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "../../test/support/fixtures";
import { labelledSpeech } from "../../test/support/long-speech";
import { dispatchOrder, findPauses, placePiece, planPieces, scheduleEnd, stitchPieces, targetPieceSeconds, type PieceResult } from "./pieces";
import { shapeTranscription, transcriptPipeline } from "./pipeline";

const RATE = 16_000;
const policy = { splitMinSeconds: 8, maxPieceSeconds: 30, minPieceSeconds: 1 };

/** An engine's answer for a piece: one segment per group of [word, start, end] (times from the piece's start). */
function answer(duration: number, groups: [string, number, number][][]): VerboseTranscription {
  const words = groups.flat().map(([word, start, end]) => ({ word, start, end }));
  const segments = groups.map((g, id) => ({
    id,
    seek: 0,
    start: g[0]![1],
    end: g.at(-1)![2],
    text: " " + g.map((w) => w[0]).join(" "),
    tokens: [],
    temperature: 0,
    avg_logprob: 0,
    compression_ratio: 1,
    no_speech_prob: 0,
  }));
  return { task: "transcribe", language: "en", duration, text: segments.map((s) => s.text.trim()).join(" "), segments, words };
}

describe("which clips are cut", () => {
  const jfk = pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!;

  it("keeps short clips and clips without two free slots whole (the single-request path)", () => {
    // jfk.wav opens with 50 ms of digital silence: the recording's own, not padding
    expect(planPieces(jfk.subarray(0, 3 * RATE), 2, policy)).toEqual([{ index: 0, startSample: 0, endSample: 3 * RATE, cost: 3 }]);
    expect(planPieces(jfk.subarray(0, 7.9 * RATE), 8, policy)).toHaveLength(1);
    expect(planPieces(jfk, 1, policy)).toHaveLength(1);
    expect(planPieces(new Int16Array(0), 4, policy)).toHaveLength(1);
  });

  it("given digital silence around the speech (a padded channel), when planned, then the pieces and cuts are the speech's own", () => {
    const cuts = (plan: { startSample: number }[], shift = 0) => plan.slice(1).map((p) => p.startSample - shift);
    const bare = planPieces(jfk, 2, policy);
    expect(bare.length).toBeGreaterThan(1);
    const padded = new Int16Array(jfk.length + 0.9 * RATE);
    padded.set(jfk);
    expect(cuts(planPieces(padded, 2, policy))).toEqual(cuts(bare));
    expect(planPieces(padded, 2, policy).at(-1)!.endSample).toBe(bare.at(-1)!.endSample);
    const led = new Int16Array(jfk.length + 1.2 * RATE);
    led.set(jfk, 1.2 * RATE);
    expect(cuts(planPieces(led, 2, policy), 1.2 * RATE)).toEqual(cuts(bare));
    expect(planPieces(led, 2, policy)[0]!.startSample).toBe(1.2 * RATE + 640);
    // a short clip: one piece, its speech
    expect(planPieces(led.subarray(0, 1.2 * RATE + 3 * RATE), 2, policy)).toEqual([{ index: 0, startSample: 1.2 * RATE + 640, endSample: 4.2 * RATE, cost: 2.96 }]);
  });

  it("aims at four pieces per slot, between the shortest and the longest piece", () => {
    expect(targetPieceSeconds(11, 2, policy)).toBeCloseTo(1.375, 6);
    expect(targetPieceSeconds(64, 2, policy)).toBe(8);
    expect(targetPieceSeconds(300, 2, policy)).toBe(30);
    expect(targetPieceSeconds(6, 8, policy)).toBe(1);
    expect(targetPieceSeconds(14_400, 2, policy)).toBe(144); // at most MAX_CHUNKS (100) pieces
  });
});

describe("planning on real speech (jfk.wav: pauses at ~2.1–3.3, 3.7–4.0, 4.3–5.4 and 7.6–8.2 s)", () => {
  const jfk = pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!;
  const covers = (pieces: { startSample: number; endSample: number }[], length: number) => {
    expect(pieces[0]!.startSample).toBe(0);
    for (let i = 1; i < pieces.length; i++) expect(pieces[i]!.startSample).toBe(pieces[i - 1]!.endSample);
    expect(pieces.at(-1)!.endSample).toBe(length);
  };

  it("finds the pauses between the words", () => {
    const pauses = findPauses(jfk).pauses.map((p) => [p.startFrame * 0.02, p.endFrame * 0.02]);
    for (const [from, to] of [[2.2, 3.2], [3.75, 3.95], [4.35, 5.3], [7.6, 8.1]]) expect(pauses.some(([a, b]) => a! <= from! && b! >= to!)).toBe(true);
  });

  it("cuts 11 s for two engines at every pause, each cut between words; pieces cover the clip", () => {
    const pieces = planPieces(jfk, 2, policy);
    covers(pieces, jfk.length);
    const cuts = pieces.slice(1).map((p) => p.startSample / RATE);
    expect(cuts).toHaveLength(4);
    // "Americans" ends at 2.0, "ask" 3.3–3.6, "not" 4.0–4.31, "what" starts at 5.35, "you" ends at 7.5, "ask" starts at 8.2
    for (const [cut, [after, before]] of cuts.map((c, i) => [c, [[2.1, 3.3], [3.6, 4.0], [4.31, 5.35], [7.5, 8.2]][i]!] as const)) {
      expect(cut).toBeGreaterThan(after);
      expect(cut).toBeLessThan(before);
    }
  });

  it("estimates each piece's cost from its voiced seconds and hands the costliest out first", () => {
    const pieces = planPieces(jfk, 2, policy);
    // the pieces with only "ask" or "not" in them cost least; the last clause most
    expect(pieces[1]!.cost).toBeLessThan(pieces[0]!.cost / 2);
    expect(pieces[2]!.cost).toBeLessThan(pieces[0]!.cost / 2);
    expect(dispatchOrder(pieces).map((p) => p.index)).toEqual([4, 3, 0, 1, 2]);
    // longest-processing-time-first on two engines: within a fifth of an even split
    const loads = [0, 0];
    for (const p of dispatchOrder(pieces)) loads[loads[0]! <= loads[1]! ? 0 : 1]! += p.cost;
    expect(Math.max(...loads) / (loads[0]! + loads[1]!)).toBeLessThan(0.6);
  });

  it("keeps every piece at least minPieceSeconds long", () => {
    const pieces = planPieces(jfk, 2, { ...policy, minPieceSeconds: 4 });
    covers(pieces, jfk.length);
    expect(pieces.length).toBeGreaterThan(1);
    for (const p of pieces) expect(p.endSample - p.startSample).toBeGreaterThanOrEqual(4 * RATE);
  });

  it("cuts a long recording at its pauses into pieces of about the target length", () => {
    const long = labelledSpeech(60);
    const pieces = planPieces(long.pcm, 2, policy);
    covers(pieces, long.pcm.length);
    expect(pieces.length).toBeGreaterThanOrEqual(6);
    expect(pieces.length).toBeLessThanOrEqual(10);
    const pauses = findPauses(long.pcm).pauses;
    for (const p of pieces.slice(1)) expect(pauses.some((q) => q.startFrame * 320 <= p.startSample && q.endFrame * 320 >= p.startSample)).toBe(true);
  });

  it("keeps the plan that shares out best: long recordings within 52% of the work on either of two engines", () => {
    for (const seconds of [60, 300]) {
      const pieces = planPieces(labelledSpeech(seconds).pcm, 2, policy);
      const total = pieces.reduce((sum, p) => sum + p.cost, 0);
      expect(scheduleEnd(pieces, 2) / total).toBeLessThan(0.52);
    }
  });

  it("cuts speech without pauses only where a piece would pass maxPieceSeconds", () => {
    // 70 s of a steady tone: no pause anywhere
    const tone = Int16Array.from({ length: 70 * RATE }, (_, i) => Math.round(8000 * Math.sin((2 * Math.PI * 220 * i) / RATE)));
    const pieces = planPieces(tone, 2, policy);
    covers(pieces, tone.length);
    expect(pieces).toHaveLength(3);
    for (const p of pieces) expect(p.endSample - p.startSample).toBeLessThanOrEqual(30 * RATE);
  });
});

describe("stitching", () => {
  const a: PieceResult = { startSample: 0, endSample: 4.8 * RATE, result: answer(4.8, [[["and", 0.29, 0.69], ["so", 0.69, 0.98]], [["ask", 3.29, 3.83], ["not", 3.99, 4.31]]]) };
  const b: PieceResult = { startSample: 4.8 * RATE, endSample: 11 * RATE, result: answer(6.2, [[["what", 0.55, 0.81], ["your", 0.81, 1.06]], [["country", 3.36, 5.9]]]) };

  it("moves each piece by its exact start, numbers segments from 0, keeps times monotonic and inside the clip", () => {
    const whole = stitchPieces([b, a], 11);
    expect(whole.duration).toBe(11);
    expect(whole.text).toBe("and so ask not what your country");
    expect(whole.segments.map((s) => [s.id, s.start, s.end])).toEqual([
      [0, 0.29, 0.98],
      [1, 3.29, 4.31],
      [2, 5.35, 5.86],
      [3, 8.16, 10.7],
    ]);
    expect(whole.segments[2]!.seek).toBe(480);
    expect(whole.words.map((w) => w.start)).toEqual([0.29, 0.69, 3.29, 3.99, 5.35, 5.61, 8.16]);
    for (let i = 1; i < whole.words.length; i++) expect(whole.words[i]!.start).toBeGreaterThanOrEqual(whole.words[i - 1]!.end);
  });

  it("keeps a piece's times inside the piece (an engine's end past its clip is clamped)", () => {
    const late: PieceResult = { startSample: RATE, endSample: 2 * RATE, result: answer(1, [[["tail", 0.5, 1.4]]]) };
    expect(placePiece(late).words[0]).toMatchObject({ start: 1.5, end: 2 });
  });

  it("returns a single piece as the engine answered it", () => {
    expect(stitchPieces([a], 4.8)).toBe(a.result);
  });

  it("formatting the stitched clip equals formatting each placed piece (formatting is per segment)", () => {
    const pipeline = transcriptPipeline({ smartFormat: true, engineFormatted: false });
    const whole = shapeTranscription(pipeline, stitchPieces([a, b], 11));
    const perPiece = [a, b].map((p) => shapeTranscription(pipeline, placePiece(p)));
    expect(whole.text).toBe(perPiece.map((p) => p.text).join(" "));
    expect(whole.text).toBe("And so. Ask not. What your. Country.");
  });
});
