import { describe, expect, it } from "vitest";
import type { VerboseTranscription } from "../../schemas/transcription";
import { streamedDelta, completeStreamedItem } from "./item-transcript";
import { shapeTranscription, transcriptPipeline, type TranscriptOptions } from "./pipeline";
import { ITEM_CUTS } from "./redact";
import { redactJoined } from "./joined";
import { settledSegments } from "./settled";

/** Segments of spoken words, one per text, 0.3 s a word, a 1 s pause between segments. */
function transcription(...texts: string[]): VerboseTranscription {
  let t = 0;
  const segments: VerboseTranscription["segments"] = [];
  const words: VerboseTranscription["words"] = [];
  texts.forEach((text, id) => {
    const start = t;
    for (const word of text.split(" ")) {
      words.push({ word, start: t, end: t + 0.25 });
      t += 0.3;
    }
    segments.push({ id, seek: 0, start, end: t, text, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 });
    t += 1;
  });
  return { task: "transcribe", language: "en", duration: t, text: texts.join(" "), segments, words };
}
const shaped = (options: TranscriptOptions, ...texts: string[]) => shapeTranscription(transcriptPipeline(options), transcription(...texts)).text;
/** How many digits a text shows in clear, spoken or as numerals. */
const digitsIn = (text: string) => (text.match(/\b(zero|oh|one|two|three|four|five|six|seven|eight|nine)\b|\d/gi) ?? []).length;

describe("a card number cut by a pause (redact=pci)", () => {
  it("given a realtime item, when a run of three or more digits touches either end, then it is redacted as a card number", () => {
    const item = { redact: ["pci" as const], cuts: ITEM_CUTS };
    expect(shaped(item, "my card number is five five five five")).toBe("My card number is [CARD_NUMBER].");
    expect(shaped(item, "five five five five and the rest later")).toBe("[CARD_NUMBER] and the rest later.");
    expect(shaped(item, "five five five five")).toBe("[CARD_NUMBER].");
    // two digits at a cut, or a run in the middle of an item, is no piece of a card number cut by the pause
    expect(shaped(item, "I have five five")).toBe("I have five five.");
    expect(shaped(item, "room four one two is free")).toBe("Room 412 is free.");
    // without pci, or where nothing was cut (a whole segment upload), digits stay
    expect(shaped({ redact: ["phone"], cuts: ITEM_CUTS }, "my card number is five five five five")).toBe("My card number is 5555.");
    expect(shaped({ redact: ["pci"] }, "my card number is five five five five")).toBe("My card number is 5555.");
  });

  it("given a job's slice, when only its start is a cut, then only a run at its start is taken", () => {
    const slice = { redact: ["pci" as const], cuts: { start: true, end: false } };
    expect(shaped(slice, "five five five five thanks")).toBe("[CARD_NUMBER] thanks.");
    expect(shaped(slice, "the code is five five five five")).toBe("The code is 5555.");
  });

  it("given a number streamed word by word in an item, when its final comes, then no delta or final word showed more than two of its digits", () => {
    const pipeline = transcriptPipeline({ redact: ["pci"], cuts: ITEM_CUTS });
    const spoken = "five five five five and the rest".split(" ");
    const emitted: ReturnType<typeof streamedDelta>["words"] = [];
    const deltas: string[] = [];
    for (let i = 1; i <= spoken.length; i++) {
      const d = streamedDelta(pipeline, emitted, spoken.slice(emitted.length, i));
      if (d.delta) deltas.push(d.delta);
      emitted.push(...d.words);
    }
    const final = completeStreamedItem(pipeline, emitted, spoken.map((word, i) => ({ word, start_ms: i * 300, end_ms: i * 300 + 250 })), 0);
    expect(deltas.join("") + final.lastDelta).toBe(final.transcript);
    expect(final.transcript).toBe("[CARD_NUMBER] and the rest.");
    for (const d of deltas) expect(digitsIn(d)).toBe(0);
  });
});

describe("settled segments of a clip streamed in pieces", () => {
  const pci = transcriptPipeline({ redact: ["pci"] });
  const CARD = ["my card is five five five five", "five five five five", "five five five five", "five nine five three thank you"];

  it("given a card number spoken across cuts, when each piece comes, then no settled segment holds a digit, and the whole redacts it", () => {
    for (let n = 1; n < CARD.length; n++) for (const text of settledSegments(pci, transcription(...CARD.slice(0, n)))) expect(digitsIn(text), text).toBe(0);
    expect(settledSegments(pci, transcription(...CARD.slice(0, 1)))).toEqual([]);
    expect(shapeTranscription(pci, transcription(...CARD)).text).toBe("My card is [CARD_NUMBER] thank you.");
  });

  it("given pieces whose segments end in words, when they come, then every segment so far is settled and the same as in the whole", () => {
    const texts = ["hello there", "my number is five", "nine three ok", "bye now"];
    const whole = shapeTranscription(pci, transcription(...texts)).segments.map((s) => s.text.trim());
    expect(settledSegments(pci, transcription(...texts.slice(0, 1)))).toEqual(whole.slice(0, 1));
    // "five" may go on: its segment waits until the next one shows it does not
    expect(settledSegments(pci, transcription(...texts.slice(0, 2)))).toEqual(whole.slice(0, 1));
    expect(settledSegments(pci, transcription(...texts.slice(0, 3)))).toEqual(whole.slice(0, 3));
    // no redaction: nothing is held
    expect(settledSegments(transcriptPipeline({}), transcription(...texts.slice(0, 2)))).toHaveLength(2);
  });
});

describe("a job's transcript joined from its slices", () => {
  it("given slices each redacted alone, when joined, then digits spread over slices are redacted over the whole", () => {
    const joined = redactJoined(
      [
        { text: "Five five.", cutBefore: false },
        { text: "Five five.", cutBefore: true },
        { text: "[CARD_NUMBER] or six nine.", cutBefore: true },
        { text: "Two.", cutBefore: true },
        { text: "33. Four or [CARD_NUMBER].", cutBefore: true },
      ],
      ["pci"],
    );
    expect(joined).toEqual(["[CARD_NUMBER].", "[CARD_NUMBER].", "[CARD_NUMBER] or [CARD_NUMBER].", "[CARD_NUMBER].", "[CARD_NUMBER] or [CARD_NUMBER]."]);
  });

  it("given a Luhn-valid card number spread over three slices' segments, when joined, then it is redacted whatever the cuts", () => {
    const joined = redactJoined(
      [
        { text: "My card is 4111 1111", cutBefore: false },
        { text: "1111", cutBefore: false },
        { text: "1111, thanks.", cutBefore: false },
      ],
      ["pci"],
    );
    expect(joined).toEqual(["My card is [CARD_NUMBER]", "[CARD_NUMBER]", "[CARD_NUMBER], thanks."]);
    // digits inside one slice, no cut: not a card number
    expect(redactJoined([{ text: "Room 412 is free.", cutBefore: false }, { text: "Bye.", cutBefore: true }], ["pci"])).toEqual(["Room 412 is free.", "Bye."]);
  });
});
