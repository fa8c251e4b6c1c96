import { describe, expect, it } from "vitest";
import type { VerboseTranscription } from "../../schemas/transcription";
import { shapeTranscription, transcriptPipeline } from "./pipeline";
import { speakerAt, speakerRolesOf } from "./speaker-stage";

const words = (text: string, from = 0) => text.split(" ").map((word, i) => ({ word, start: from + i * 0.3, end: from + i * 0.3 + 0.25 }));
const segment = (id: number, start: number, end: number, text: string) => ({ id, seek: 0, start, end, text, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 });

/** One engine segment in which the speaker changes at 1.5 s (agent, then customer). */
const call = (): VerboseTranscription => ({
  task: "transcribe",
  language: "en",
  duration: 3,
  text: "how can i help my card is lost",
  segments: [segment(0, 0, 2.7, " how can i help my card is lost")],
  words: [...words("how can i help"), ...words("my card is lost", 1.5)],
});
const turns = [
  { start: 0, end: 1.3, speaker: 0 },
  { start: 1.45, end: 2.8, speaker: 1 },
];

describe("the speaker stage: diarizer turns → speaker labels on words and segments", () => {
  it("labels each word by the turn it overlaps most, the nearest when it overlaps none", () => {
    expect(speakerAt(turns, 0.3, 0.55)).toBe(0);
    expect(speakerAt(turns, 1.2, 1.6)).toBe(1); // 0.1 s in turn 0, 0.15 s in turn 1
    expect(speakerAt(turns, 5, 5.2)).toBe(1);
    expect(speakerAt([], 0, 1)).toBeUndefined();
  });

  it("splits a segment where the speaker changes; each turn is formatted as its own run; roles name speakers", () => {
    const r = shapeTranscription(transcriptPipeline({ speakerTurns: turns, metadata: { speaker_roles: { "0": "agent" } } }), call());
    expect(r.segments.map((s) => [s.id, s.start, s.end, s.speaker, s.speaker_role, s.text])).toEqual([
      [0, 0, 1.15, 0, "agent", "How can I help?"],
      [1, 1.5, 2.7, 1, undefined, "My card is lost."],
    ]);
    expect(r.words.map((w) => w.speaker)).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
    expect(r.text).toBe("How can I help? My card is lost.");
  });

  it("with formatting off, an unsplit segment keeps the engine's text; a segment without words takes its turn's speaker", () => {
    const one = { ...call(), words: words("how can i help"), segments: [segment(0, 0, 1.2, " How can I help?"), segment(1, 1.5, 2.7, " my card is lost")] };
    const r = shapeTranscription(transcriptPipeline({ speakerTurns: turns, smartFormat: false }), one);
    expect(r.segments.map((s) => [s.text, s.speaker])).toEqual([
      [" How can I help?", 0],
      [" my card is lost", 1],
    ]);
    expect(r.words[0]).not.toHaveProperty("punctuated_word");
  });

  it("reads speaker_roles as speaker number → name and ignores anything else", () => {
    expect([...speakerRolesOf({ speaker_roles: { "0": "agent", "1": " customer ", x: "no", "2": 3 } })]).toEqual([
      [0, "agent"],
      [1, "customer"],
    ]);
    expect(speakerRolesOf({ speaker_roles: ["agent"] }).size).toBe(0);
    expect(speakerRolesOf(undefined).size).toBe(0);
  });
});
