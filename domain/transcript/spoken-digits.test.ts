import { describe, expect, it } from "vitest";
import { smartFormatText as f } from "./smart-format";
import { digitsAt } from "./spoken-digits";

/** given spoken words, when smart format runs, then they read as written. */
const cases = (rows: readonly (readonly [string, string])[]) => {
  for (const [spoken, written] of rows) expect(f(spoken), spoken).toBe(written);
};

describe("numbers as people write them (issue 27)", () => {
  it("formats the issue's table", () => {
    cases([
      ["my number is five five five one two three four", "My number is 555-1234."],
      ["call me at two one two five five five one two one two", "Call me at 212-555-1212."],
      ["room four oh four", "Room 404."],
      ["the year nineteen ninety nine", "The year 1999."],
      ["one two three four", "1234."],
    ]);
  });

  it("reads digit runs with oh, zero, double and triple", () => {
    cases([
      ["the code is four oh four two", "The code is 4042."],
      ["pin zero zero one two", "Pin 0012."],
      ["double five seven", "557."],
      ["it was triple seven two", "It was 7772."],
      ["five oh nine", "509."],
    ]);
  });

  it("groups national phone numbers, written plus international", () => {
    cases([
      ["five five five twelve thirty four", "555-1234."],
      ["call one eight zero zero five five five one two one two", "Call 1-800-555-1212."],
      ["plus four four two zero seven nine four six zero nine five eight", "+442079460958."],
      ["dial plus one two one two five five five one two one two", "Dial +1 212-555-1212."],
    ]);
  });

  it("keeps cards, accounts and codes as plain digits, social security numbers in their groups", () => {
    cases([
      ["my card number is four one one one one one one one one one one one one one one one", "My card number is 4111111111111111."],
      ["account number five five five one two three four", "Account number 5551234."],
      ["social security number one two three four five six seven eight nine", "Social security number 123-45-6789."],
    ]);
  });

  it("writes rooms, flights and gates after their word, even two digits", () => {
    cases([
      ["flight two one two", "Flight 212."],
      ["we are in room number three one", "We are in room number 31."],
      ["gate twelve", "Gate 12."],
    ]);
  });

  it("reads years and decimals", () => {
    cases([
      ["in two thousand five", "In 2005."],
      ["from nineteen eighty until twenty twenty", "From 1980 until 2020."],
      ["three point five", "3.5."],
    ]);
  });

  it("stays conservative where the words are ambiguous", () => {
    cases([
      ["call five five five", "Call five five five."],
      ["one two three", "One two three."],
      ["twenty twenty", "Twenty twenty."],
      ["one two three four dollars", "One two three four dollars."],
      ["oh one two three", "Oh one two three."],
      ["a double room for two", "A double room for two."],
      ["nineteen ninety nine", "Nineteen ninety nine."],
    ]);
  });

  it("is idempotent on its own output", () => {
    for (const raw of ["call me at two one two five five five one two one two", "room four oh four", "plus four four two zero seven nine four six zero nine five eight"]) {
      expect(f(f(raw))).toBe(f(raw));
    }
  });
});

describe("digitsAt", () => {
  const read = (text: string, i: number, after = false) => {
    const raw = text.split(" ");
    return digitsAt(raw.map((w) => w.toLowerCase()), raw, i, after);
  };
  it("reads written tokens and spoken steps", () => {
    expect(read("4111-1111", 0)).toEqual({ digits: "41111111", end: 1 });
    expect(read("3:30", 0)).toBeUndefined();
    expect(read("twenty five", 0)).toMatchObject({ digits: "25", end: 2 });
    expect(read("oh", 0)).toBeUndefined();
    expect(read("oh", 0, true)).toMatchObject({ digits: "0" });
    expect(read("double five", 0)).toMatchObject({ digits: "55", end: 2 });
  });
});
