import { describe, expect, it } from "vitest";
import type { VerboseTranscription } from "../../schemas/transcription";
import { renderTranscription } from "./segment-formats";

const result: VerboseTranscription = {
  task: "transcribe",
  language: "en",
  duration: 3725.5,
  text: "Hello there. General Kenobi.",
  segments: [
    { id: 0, seek: 0, start: 0, end: 1.25, text: " Hello there.", tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 },
    { id: 1, seek: 0, start: 3723.0015, end: 3725.5, text: " General Kenobi.", tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 },
  ],
  words: [],
};

describe("segment response formats", () => {
  it("srt: numbered cues, comma milliseconds, hours", () => {
    expect(renderTranscription(result, "srt").body).toBe(
      "1\n00:00:00,000 --> 00:00:01,250\nHello there.\n\n2\n01:02:03,002 --> 01:02:05,500\nGeneral Kenobi.\n\n",
    );
  });
  it("vtt: WEBVTT header, dot milliseconds", () => {
    const r = renderTranscription(result, "vtt");
    expect(r.contentType).toMatch(/^text\/vtt/);
    expect(r.body).toBe("WEBVTT\n\n00:00:00.000 --> 00:00:01.250\nHello there.\n\n01:02:03.002 --> 01:02:05.500\nGeneral Kenobi.\n\n");
  });
  it("multichannel: SRT cues start [Channel N], WebVTT cues carry the voice tag <v Channel N>", () => {
    const labelled = { ...result, segments: result.segments.map((s, i) => ({ ...s, channel: i })) };
    expect(renderTranscription(labelled, "srt").body).toContain("00:00:00,000 --> 00:00:01,250\n[Channel 0] Hello there.\n");
    expect(renderTranscription(labelled, "srt").body).toContain("[Channel 1] General Kenobi.");
    expect(renderTranscription(labelled, "vtt").body).toContain("00:00:00.000 --> 00:00:01.250\n<v Channel 0>Hello there.\n");
    expect(renderTranscription(labelled, "vtt").body).toContain("<v Channel 1>General Kenobi.");
  });
  it("text, json and verbose_json", () => {
    expect(renderTranscription(result, "text").body).toBe("Hello there. General Kenobi.\n");
    expect(JSON.parse(renderTranscription(result, "json").body)).toEqual({ text: result.text, usage: { type: "duration", seconds: 3726 } });
    expect(JSON.parse(renderTranscription(result, "verbose_json").body)).toEqual(result);
  });
  it("an empty transcript still renders valid files", () => {
    const empty = { ...result, text: "", segments: [] };
    expect(renderTranscription(empty, "srt").body).toBe("");
    expect(renderTranscription(empty, "vtt").body).toBe("WEBVTT\n\n");
  });
  it("with speakers: SRT and VTT cues name them (a role where given), diarized_json labels them A, B in OpenAI's shape", () => {
    const [a, b] = result.segments;
    const diarized = { ...result, segments: [{ ...a!, speaker: 0 }, { ...b!, speaker: 1, speaker_role: "customer" }] };
    expect(renderTranscription(diarized, "srt").body).toContain("\n[Speaker A] Hello there.\n");
    expect(renderTranscription(diarized, "srt").body).toContain("\n[customer] General Kenobi.\n");
    expect(renderTranscription(diarized, "vtt").body).toContain("\n<v Speaker A>Hello there.\n");
    expect(JSON.parse(renderTranscription(diarized, "diarized_json").body)).toEqual({
      task: "transcribe",
      duration: 3725.5,
      text: result.text,
      segments: [
        { type: "transcript.text.segment", id: "seg_0", start: 0, end: 1.25, speaker: "A", text: "Hello there." },
        { type: "transcript.text.segment", id: "seg_1", start: 3723.0015, end: 3725.5, speaker: "B", text: "General Kenobi." },
      ],
      usage: { type: "duration", seconds: 3726 },
    });
  });
});
