import { beforeAll, describe, expect, it } from "vitest";
import { annotateSegments, applyToText, candidateSpans, confidentAnnotations, loadPronouncer, resolveOverlaps, vocabularyOf, type Annotation, type Pronounce } from "./review-embedded";

let pronounce: Pronounce;
beforeAll(async () => {
  pronounce = await loadPronouncer();
});

describe("embedded reviewer matcher", () => {
  it("takes terms from every metadata string and the prompt's content words", () => {
    const terms = vocabularyOf({ known_medications: ["metformin", "lisinopril"], speaker_roles: { a: "cardiologist" }, n: 3 }, "The patient with the cardiologist");
    expect(terms.map((t) => t.text)).toEqual(["metformin", "lisinopril", "cardiologist", "patient"]);
  });

  it("hears one term as several words and keeps the rest of the segment", () => {
    const vocabulary = vocabularyOf({ known_medications: ["metformin"] }, undefined);
    const annotations = annotateSegments([{ id: 0, text: "she takes met for men twice a day." }], vocabulary, pronounce);
    const confident = confidentAnnotations(annotations);
    expect(confident).toMatchObject([{ segment_id: 0, start_word: 2, end_word: 5, original: "met for men", suggestion: "metformin" }]);
    expect(applyToText("she takes met for men twice a day.", confident)).toBe("she takes metformin twice a day.");
  });

  it("changes nothing without a confident match", () => {
    const vocabulary = vocabularyOf({ names: ["Kennedy", "Americana"] }, undefined);
    const text = "ask not what your country can do for you my fellow americans";
    expect(confidentAnnotations(annotateSegments([{ id: 0, text }], vocabulary, pronounce))).toEqual([]);
  });

  it("keeps the best of overlapping candidates per segment, in word order", () => {
    const a = (segment_id: number, start_word: number, end_word: number, confidence: number): Annotation => ({
      segment_id, start_word, end_word, original: "x", suggestion: "y", reason: "r", confidence,
    });
    const kept = resolveOverlaps([a(0, 2, 4, 0.7), a(0, 3, 5, 0.9), a(1, 0, 2, 0.6), a(0, 0, 2, 0.8), a(0, 3, 4, 0.9)]);
    expect(kept.map((k) => [k.segment_id, k.start_word, k.end_word])).toEqual([
      [0, 0, 2],
      [0, 3, 4],
      [1, 0, 2],
    ]);
  });

  it("lists overlapping candidates below the report floor only when asked", () => {
    const vocabulary = vocabularyOf({ characters: ["John Dashwood"] }, undefined);
    const segments = [{ id: 0, text: "and mr john guess would have been at leisure" }];
    const all = candidateSpans(segments, vocabulary, pronounce, 0.5);
    expect(all.length).toBeGreaterThan(annotateSegments(segments, vocabulary, pronounce).length);
    expect(resolveOverlaps(candidateSpans(segments, vocabulary, pronounce))).toEqual(annotateSegments(segments, vocabulary, pronounce));
  });
});
