import { describe, expect, it } from "vitest";
import { redactedSpans } from "./redact-audio";

describe("redactedSpans", () => {
  it("joins consecutive words of one entity, moves them onto the job's timeline and clamps them to the slice", () => {
    const w = (word: string, start: number, entity?: string) => ({ word, start, end: start + 0.4, ...(entity ? { entity } : {}) });
    const result = {
      task: "transcribe" as const, language: "en", duration: 10, text: "", segments: [],
      words: [w("card", 0), w("[CARD_NUMBER]", 1, "CARD_NUMBER"), w("[CARD_NUMBER]", 1.5, "CARD_NUMBER"), w("and", 2), w("[SSN]", 3, "SSN"), w("[PHONE_NUMBER]", 3.5, "PHONE_NUMBER"), w("[NUMBER]", 9.8, "NUMBER")],
    };
    expect(redactedSpans(result, 100, 110)).toEqual([
      { start_time: 101, end_time: 101.9, entity: "CARD_NUMBER" },
      { start_time: 103, end_time: 103.4, entity: "SSN" },
      { start_time: 103.5, end_time: 103.9, entity: "PHONE_NUMBER" },
      { start_time: 109.8, end_time: 110, entity: "NUMBER" },
    ]);
  });
});
