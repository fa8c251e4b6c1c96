import { beforeAll, describe, expect, it } from "vitest";
import { annotateSegments, applyToText, confidentAnnotations, loadPronouncer, vocabularyOf, type Pronounce } from "./review-embedded";

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
});
