import { describe, expect, it } from "vitest";
import type { VerboseTranscription } from "../../schemas/transcription";
import { shapeRun, shapeTranscription, transcriptPipeline, type TranscriptPipeline } from "./pipeline";
import type { TranscriptStage } from "./stage";

/** Words 300 ms apart (250 ms long) from `from` seconds. */
const words = (text: string, from = 0) => text.split(" ").map((word, i) => ({ word, start: from + i * 0.3, end: from + i * 0.3 + 0.25, probability: 0.9 }));
const segment = (id: number, start: number, end: number, text: string) => ({ id, seek: 0, start, end, text, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 });

/** Two segments as PocketSphinx gives them: lowercase, no punctuation. */
const engine = (): VerboseTranscription => ({
  task: "transcribe",
  language: "en",
  duration: 3,
  text: "it costs twenty five dollars do you take jfk",
  segments: [segment(0, 0, 1.45, " it costs twenty five dollars"), segment(1, 1.5, 2.65, " do you take jfk")],
  words: [...words("it costs twenty five dollars"), ...words("do you take jfk", 1.5)],
});

/** A stand-in for a later stage (redaction): numerals become "[number]". */
const redactNumbers: TranscriptStage = {
  name: "redact_numbers",
  shape: (ws) => ws.map((w) => ({ ...w, form: w.form.replace(/[$€]?\d+(?:[,.:]\d+)*(?:st|nd|rd|th|%)?/, "[number]") })),
  shapeStreamed: (ws) => [...ws],
};

describe("the transcript pipeline: an engine's words and the request's options → the delivered transcript", () => {
  it("smart format on (the default): each segment one run of its own words, every word a form, text the segments joined", () => {
    const r = shapeTranscription(transcriptPipeline({ prompt: "Flights from JFK" }), engine());
    expect(r.text).toBe("It costs $25. Do you take JFK?");
    expect(r.segments.map((s) => s.text)).toEqual(["It costs $25.", "Do you take JFK?"]);
    expect(r.words.map((w) => w.punctuated_word)).toEqual(["It", "costs", "$25.", "", "", "Do", "you", "take", "JFK?"]);
    // tokens and timings stay as recognised
    expect(r.words.map(({ word, start, end }) => ({ word, start, end }))).toEqual(engine().words.map(({ word, start, end }) => ({ word, start, end })));
    expect(r.duration).toBe(3);
  });

  it("delivers the engine's result as it came when smart format is off or the engine formats its own text", () => {
    const e = engine();
    expect(transcriptPipeline({ smartFormat: false }).stages).toEqual([]);
    expect(shapeTranscription(transcriptPipeline({ smartFormat: false }), e)).toBe(e);
    expect(shapeTranscription(transcriptPipeline({ engineFormatted: true }), e)).toBe(e);
    expect(transcriptPipeline({}).stages.map((s) => s.name)).toEqual(["smart_format"]);
    expect(transcriptPipeline({ smartFormat: null }).stages.map((s) => s.name)).toEqual(["smart_format"]);
  });

  it("takes the caller's vocabulary from job metadata and the prompt", () => {
    const e = { ...engine(), text: "i met ana and jfk on monday", segments: [], words: [] };
    expect(shapeTranscription(transcriptPipeline({}), e).text).toBe("I met ana and jfk on Monday.");
    expect(shapeTranscription(transcriptPipeline({ metadata: { speakers: ["Ana"] }, prompt: "Notes on JFK" }), e).text).toBe("I met Ana and JFK on Monday.");
  });

  it("shapes a segment without words from its text, and words no segment claims", () => {
    const e = engine();
    const r = shapeTranscription(transcriptPipeline({}), { ...e, segments: [e.segments[0]!, segment(1, 5, 6, " see you on friday")] });
    expect(r.segments.map((s) => s.text)).toEqual(["It costs $25.", "See you on Friday."]);
    // "do you take jfk" sits in no segment: its words get forms, the text does not carry them
    expect(r.words.slice(5).map((w) => w.punctuated_word)).toEqual(["Do", "you", "take", "jfk?"]);
    expect(r.text).toBe("It costs $25. See you on Friday.");
  });

  it("runs its stages in order, each on the forms the one before gave", () => {
    const pipeline: TranscriptPipeline = { stages: [...transcriptPipeline({ prompt: "JFK" }).stages, redactNumbers] };
    expect(shapeTranscription(pipeline, engine()).text).toBe("It costs [number]. Do you take JFK?");
    const run = shapeRun(pipeline, "the fifth of may".split(" ").map((word) => ({ word, form: word })));
    expect(run.map((w) => w.form)).toEqual(["The", "[number]", "of", "May."]);
    expect(run.map((w) => w.word)).toEqual(["the", "fifth", "of", "may"]);
  });
});
