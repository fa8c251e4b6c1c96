import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import type { VerboseTranscription } from "../../schemas/transcription";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "../../test/support/fixtures";
import { pieceCount, placePiece, planPieces, stitchPieces, type PieceResult } from "./pieces";
import { shapeTranscription, transcriptPipeline } from "./pipeline";

const RATE = 16_000;
const policy = { splitMinSeconds: 8, maxPieceSeconds: 30 };

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

describe("how many pieces", () => {
  it("keeps short clips and clips without two free slots whole (the single-request path)", () => {
    expect(pieceCount(3, 2, policy)).toBe(1);
    expect(pieceCount(7.9, 8, policy)).toBe(1);
    expect(pieceCount(300, 1, policy)).toBe(1);
    expect(pieceCount(0, 4, policy)).toBe(1);
  });

  it("gives each slot a piece while pieces keep half the split threshold (4 s)", () => {
    expect(pieceCount(8, 2, policy)).toBe(2);
    expect(pieceCount(11, 2, policy)).toBe(2);
    expect(pieceCount(11, 8, policy)).toBe(2); // 4 s pieces at most: 11 / 4 → 2
    expect(pieceCount(60, 8, policy)).toBe(8);
    expect(pieceCount(60, 2, policy)).toBe(2);
  });

  it("cuts pieces of at most maxPieceSeconds, in whole rounds of the slots", () => {
    expect(pieceCount(300, 2, policy)).toBe(10);
    expect(pieceCount(301, 2, policy)).toBe(12); // 11 needed, rounded up to 6 rounds of 2
    expect(pieceCount(300, 8, policy)).toBe(16); // 10 needed, rounded up to 2 rounds of 8
    expect(pieceCount(61, 2, policy)).toBe(4);
  });
});

describe("planning on real speech (jfk.wav: pauses at ~2.2–3.3, 4.3–5.3 and 7.7–8.2 s)", () => {
  const jfk = pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!;

  it("cuts 11 s for two engines in the pause nearest the middle; pieces cover the clip", () => {
    const pieces = planPieces(jfk, 2, policy);
    expect(pieces).toHaveLength(2);
    expect(pieces[0]!.startSample).toBe(0);
    expect(pieces[1]!.startSample).toBe(pieces[0]!.endSample);
    expect(pieces[1]!.endSample).toBe(jfk.length);
    const cut = pieces[0]!.endSample / RATE;
    expect(cut).toBeGreaterThan(4.3);
    expect(cut).toBeLessThan(5.35); // "not" ends at 4.31, "what" starts at 5.35
  });

  it("is the whole clip below the threshold", () => {
    expect(planPieces(jfk.subarray(0, 3 * RATE), 2, policy)).toEqual([{ index: 0, startSample: 0, endSample: 3 * RATE }]);
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
