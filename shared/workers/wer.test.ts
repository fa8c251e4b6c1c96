import { describe, expect, it } from "vitest";
import { formattedErrorRate, normaliseWords, wordErrorRate } from "./wer";

describe("word error rate", () => {
  it("counts substitutions, deletions and insertions over the reference", () => {
    expect(wordErrorRate("a b c d", "a x c d").errors).toBe(1);
    expect(wordErrorRate("a b c d", "a c d").errors).toBe(1);
    expect(wordErrorRate("a b c d", "a b c d e").errors).toBe(1);
    expect(wordErrorRate("a b c d", "a x c d").wer).toBe(0.25);
  });
  it("normalises case, punctuation and abbreviations", () => {
    expect(normaliseWords("Mr. John's  DOG, barks!")).toEqual(["mister", "john's", "dog", "barks"]);
    expect(wordErrorRate("And so, my fellow Americans.", "and so my fellow americans").wer).toBe(0);
  });
  it("handles empty references", () => {
    expect(wordErrorRate("", "").wer).toBe(0);
    expect(wordErrorRate("", "noise").wer).toBe(1);
  });
});

describe("formatted error rate", () => {
  it("counts case, punctuation and numerals as errors", () => {
    expect(formattedErrorRate("And so, my fellow Americans.", "And so, my fellow Americans.").errors).toBe(0);
    expect(formattedErrorRate("And so, my fellow Americans.", "and so my fellow americans").errors).toBe(3);
    expect(formattedErrorRate("It rose 25% today.", "it rose twenty five percent today").errors).toBe(5);
  });
});
