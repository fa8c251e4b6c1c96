import { describe, expect, it } from "vitest";
import { keytermsJson, keytermValues } from "./keyterms";

describe("keyterms", () => {
  it("given form values: comma-separated, repeated or a JSON array; trimmed, blanks dropped, duplicates (any case) once in the first spelling", () => {
    expect(keytermValues.parse(["Dashwood, prudently", " New  York ", "dashwood", '["Zorblax", "metformin"]', " , "])).toEqual(["Dashwood", "prudently", "New York", "Zorblax", "metformin"]);
  });
  it("given a JSON body: an array or one comma-separated string", () => {
    expect(keytermsJson.parse(["Smith, John", "Elinor"])).toEqual(["Smith, John", "Elinor"]);
    expect(keytermsJson.parse("Dashwood,prudently")).toEqual(["Dashwood", "prudently"]);
  });
  it("refuses more than 100 terms, a term over 50 characters, an empty or control-character term, non-strings and a malformed JSON array", () => {
    expect(keytermsJson.safeParse(Array.from({ length: 101 }, (_, i) => `t${i}`)).error?.issues[0]?.message).toMatch(/at most 100 keyterms/);
    expect(keytermsJson.safeParse(Array.from({ length: 100 }, (_, i) => `t${i}`)).success).toBe(true);
    expect(keytermsJson.safeParse(["x".repeat(51)]).error?.issues[0]?.message).toMatch(/at most 50 characters/);
    expect(keytermsJson.safeParse(["x".repeat(50)]).success).toBe(true);
    expect(keytermsJson.safeParse(["  "]).success).toBe(false);
    expect(keytermsJson.safeParse(["a\u0000b"]).success).toBe(false);
    expect(keytermsJson.safeParse(["a\u001fb"]).success).toBe(false);
    expect(keytermsJson.safeParse([3]).success).toBe(false);
    expect(keytermValues.safeParse(["[not json"]).success).toBe(false);
    expect(keytermValues.safeParse(['["a", 1]']).success).toBe(false);
  });
});
