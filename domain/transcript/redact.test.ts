import { describe, expect, it } from "vitest";
import { redactList } from "../../schemas/redact";
import { streamedDelta, completeStreamedItem, type EmittedWord } from "./item-transcript";
import { shapeTranscription, transcriptPipeline } from "./pipeline";
import { findEntities, luhnValid, redactRules } from "./redact";
import type { RedactEntity } from "../../schemas/redact";

const rules = (...e: RedactEntity[]) => redactRules(e, []);
const spans = (text: string, ...e: RedactEntity[]) => findEntities(text.split(" "), rules(...e)).map((s) => [s.label, text.split(" ").slice(s.from, s.end).join(" ")]);

/** given spoken words, when the pipeline shapes them with `redact`, then the text reads so. */
function shaped(text: string, redact: RedactEntity[], smartFormat = true, prompt?: string): string {
  const words = text.split(" ").map((word, i) => ({ word, start: i * 0.3, end: i * 0.3 + 0.25 }));
  const r = shapeTranscription(transcriptPipeline({ smartFormat, redact, prompt }), { task: "transcribe", language: "en", duration: 10, text, segments: [{ id: 0, seek: 0, start: 0, end: 10, text, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 }], words });
  return r.text;
}

const CARD = "four one one one one one one one one one one one one one one one";

describe("redact values", () => {
  it("parses one, comma-separated and repeated values, and refuses others clearly", () => {
    expect(redactList.parse("pci")).toEqual(["pci"]);
    expect(redactList.parse("ssn, PCI")).toEqual(["pci", "ssn"]);
    expect(redactList.parse(["phone", "email,numbers"])).toEqual(["phone", "email", "numbers"]);
    const bad = redactList.safeParse("pci,cards");
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.message).toBe('redact must be one or more of pci, ssn, phone, email, numbers, pii (comma-separated or repeated); got "cards"');
    expect(redactList.safeParse("").success).toBe(false);
  });
});

describe("finding entities", () => {
  it("takes Luhn-valid card numbers only", () => {
    expect(luhnValid("4111111111111111")).toBe(true);
    expect(luhnValid("4111111111111112")).toBe(false);
    expect(spans(`my card is ${CARD} thanks`, "pci")).toEqual([["CARD_NUMBER", CARD]]);
    expect(spans(CARD.replace(/one$/, "two"), "pci")).toEqual([]);
    expect(spans("4111 1111 1111 1111", "pci")).toEqual([["CARD_NUMBER", "4111 1111 1111 1111"]]);
    expect(spans("4111-1111-1111-1111.", "pci")).toEqual([["CARD_NUMBER", "4111-1111-1111-1111."]]);
  });

  it("takes expiry and security code only in context", () => {
    expect(spans("expiry oh four twenty six and the security code is one two three", "pci")).toEqual([["CARD_EXPIRY", "oh four twenty six"], ["CARD_SECURITY_CODE", "one two three"]]);
    expect(spans("it expires twelve twenty six", "pci")).toEqual([["CARD_EXPIRY", "twelve twenty six"]]);
    expect(spans("the cvv is four five six", "pci")).toEqual([["CARD_SECURITY_CODE", "four five six"]]);
    expect(spans("we need one two three", "pci")).toEqual([]);
  });

  it("takes social security numbers with their words, phones by length, numbers of any kind", () => {
    expect(spans("my social security number is one two three four five six seven eight nine", "ssn")).toEqual([["SSN", "one two three four five six seven eight nine"]]);
    expect(spans("one two three four five six seven eight nine", "ssn")).toEqual([]);
    expect(spans("call five five five one two three four now", "phone")).toEqual([["PHONE_NUMBER", "five five five one two three four"]]);
    expect(spans("plus four four two zero seven nine four six zero nine five eight", "phone")).toEqual([["PHONE_NUMBER", "plus four four two zero seven nine four six zero nine five eight"]]);
    expect(spans("room four oh four at twenty five past", "numbers")).toEqual([["NUMBER", "four oh four"], ["NUMBER", "twenty five"]]);
  });

  it("takes spoken and written e-mail addresses", () => {
    expect(spans("write to john dot smith at example dot com today", "email")).toEqual([["EMAIL", "john dot smith at example dot com"]]);
    expect(spans("email me at jane@example.org", "email")).toEqual([["EMAIL", "jane@example.org"]]);
    expect(spans("meet me at the office", "email")).toEqual([]);
  });
});

describe("the redaction stage", () => {
  it("replaces spans by labels in text and words, keeping timings", () => {
    expect(shaped(`my card is ${CARD} thanks`, ["pci"])).toBe("My card is [CARD_NUMBER] thanks.");
    expect(shaped(`my card is ${CARD}`, ["pci"])).toBe("My card is [CARD_NUMBER].");
    expect(shaped(`my card is ${CARD}`, ["pci"], false)).toBe("my card is [CARD_NUMBER]");
    expect(shaped("call me at two one two five five five one two one two", ["phone"])).toBe("Call me at [PHONE_NUMBER].");
    expect(shaped("dial plus four four two zero seven nine four six zero nine five eight now", ["pii"])).toBe("Dial [PHONE_NUMBER] now.");
    expect(shaped("it costs three hundred dollars", ["numbers"])).toBe("It costs [NUMBER].");
    expect(shaped("ask doctor jones about it", ["pii"], true, "Doctor Jones")).toBe("Ask [NAME] about it.");
    const words = `card ${CARD} ok`.split(" ").map((word, i) => ({ word, start: i, end: i + 0.5 }));
    const r = shapeTranscription(transcriptPipeline({ redact: ["pci"] }), { task: "transcribe", language: "en", duration: 20, text: "", segments: [], words });
    expect(r.words.slice(1, 17).every((w) => w.word === "[CARD_NUMBER]" && w.entity === "CARD_NUMBER")).toBe(true);
    expect(r.words.map((w) => [w.start, w.end])).toEqual(words.map((w) => [w.start, w.end]));
    expect(JSON.stringify(r)).not.toMatch(/\bone\b|1111/);
  });

  it("under numbers, sends no number word in a delta that the final writes as digits", () => {
    const pipeline = transcriptPipeline({ redact: ["numbers"] });
    const emitted: EmittedWord[] = [];
    const deltas: string[] = [];
    const spoken = "it cost three hundred and five dollars in twenty twenty four".split(" ");
    for (let n = 1; n <= spoken.length; n++) {
      const d = streamedDelta(pipeline, emitted, spoken.slice(emitted.length, n));
      deltas.push(d.delta);
      emitted.push(...d.words);
    }
    const final = completeStreamedItem(pipeline, emitted, spoken.map((word, i) => ({ word, start_ms: i * 300, end_ms: i * 300 + 250 })), 0);
    expect(deltas.join("") + final.lastDelta).toBe(final.transcript);
    expect(final.transcript).toBe("It cost [NUMBER] dollars in [NUMBER].");
    expect(shaped("it cost three hundred and five dollars", ["numbers"])).toBe("It cost [NUMBER].");
  });

  it("holds back an open digit run in deltas, then sends it redacted", () => {
    const pipeline = transcriptPipeline({ redact: ["pci"] });
    const emitted: EmittedWord[] = [];
    const deltas: string[] = [];
    const spoken = `my card is ${CARD} thanks a lot`.split(" ");
    for (let n = 1; n <= spoken.length; n++) {
      const d = streamedDelta(pipeline, emitted, spoken.slice(emitted.length, n));
      deltas.push(d.delta);
      emitted.push(...d.words);
    }
    expect(deltas.join("")).toBe("My card is [CARD_NUMBER] thanks a lot");
    expect(deltas.some((d) => /one|four/.test(d))).toBe(false);
    const final = completeStreamedItem(pipeline, emitted, spoken.map((word, i) => ({ word, start_ms: i * 300, end_ms: i * 300 + 250 })), 0);
    expect(deltas.join("") + final.lastDelta).toBe(final.transcript);
    expect(final.transcript).toBe("My card is [CARD_NUMBER] thanks a lot.");
    expect(JSON.stringify(final.words)).not.toMatch(/"one"|"four"/);
  });
});

describe("redaction across segments", () => {
  it("takes a card number whose groups the engine put in two segments", () => {
    const spoken = `my card is ${CARD} thanks`.split(" ");
    const words = spoken.map((word, i) => ({ word, start: i * 0.3, end: i * 0.3 + 0.25 }));
    const seg = (id: number, start: number, end: number, text: string) => ({ id, seek: 0, start, end, text, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 });
    const r = shapeTranscription(transcriptPipeline({ redact: ["pci"] }), { task: "transcribe", language: "en", duration: 10, text: "", segments: [seg(0, 0, 3.0, ""), seg(1, 3.0, 10, "")], words });
    // the label sits where the number began; the second segment keeps what follows it
    expect(r.text).toBe("My card is [CARD_NUMBER] thanks.");
    expect(r.segments.map((s) => s.text)).toEqual(["My card is [CARD_NUMBER]", "thanks."]);
    expect(JSON.stringify(r)).not.toMatch(/"(one|four)"/);
  });
});
