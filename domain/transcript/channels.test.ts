import { describe, expect, it } from "vitest";
import type { VerboseTranscription } from "../../schemas/transcription";
import { mergeChannels } from "./channels";
import { shapeTranscription, transcriptPipeline } from "./pipeline";

const segment = (id: number, start: number, end: number, text: string) => ({ id, seek: 0, start, end, text, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 });
const words = (text: string, from: number) => text.split(" ").map((word, i) => ({ word, start: from + i * 0.3, end: from + i * 0.3 + 0.25 }));
const engine = (parts: [number, string][]): VerboseTranscription => ({
  task: "transcribe",
  language: "en",
  duration: 10,
  text: parts.map(([, t]) => t).join(" "),
  segments: parts.map(([at, t], i) => segment(i, at, at + t.split(" ").length * 0.3, ` ${t}`)),
  words: parts.flatMap(([at, t]) => words(t, at)),
});

describe("channel labels, a stage of the one transcript pipeline", () => {
  it("labels every word and segment with the channel, after formatting and redaction", () => {
    const pipeline = transcriptPipeline({ channel: 1, redact: ["numbers"] });
    expect(pipeline.stages.map((s) => s.name)).toEqual(["smart_format", "redact", "channel"]);
    const r = shapeTranscription(pipeline, engine([[0, "my number is four two"], [3, "thank you"]]));
    expect(r.words.every((w) => w.channel === 1)).toBe(true);
    expect(r.segments.map((s) => s.channel)).toEqual([1, 1]);
    expect(r.text).toBe("My number is [NUMBER]. Thank you.");
  });

  it("labels a segment without words (an engine that gives none) too", () => {
    const r = shapeTranscription(transcriptPipeline({ channel: 0, smartFormat: false }), { ...engine([[0, "hello there"]]), words: [] });
    expect(r.segments[0]).toMatchObject({ channel: 0, text: "hello there" });
  });

  it("without a channel the pipeline carries no label", () => {
    const r = shapeTranscription(transcriptPipeline({}), engine([[0, "hello there"]]));
    expect(r.words.some((w) => "channel" in w)).toBe(false);
    expect(r.segments.some((s) => "channel" in s)).toBe(false);
  });
});

describe("mergeChannels: every channel in one time-ordered view, each channel kept", () => {
  const left = engine([[0, "and so my fellow americans"], [4, "ask not"]]);
  const right = engine([[2, "she had your dark suit"], [4, "in greasy wash water"]]);
  const merged = mergeChannels(
    [
      { channel: 1, result: right },
      { channel: 0, result: left },
    ],
    10,
  );

  it("orders segments and words by start across channels (a tie goes to the lower channel), numbering segments from 0", () => {
    expect(merged.segments.map((s) => [s.id, s.channel, s.start])).toEqual([
      [0, 0, 0],
      [1, 1, 2],
      [2, 0, 4],
      [3, 1, 4],
    ]);
    const starts = merged.words.map((w) => w.start);
    expect(starts).toEqual([...starts].sort((a, b) => a - b));
    expect(new Set(merged.words.map((w) => w.channel))).toEqual(new Set([0, 1]));
    expect(merged.text).toBe("and so my fellow americans she had your dark suit ask not in greasy wash water");
    expect(merged.duration).toBe(10);
  });

  it("keeps each channel's own text, segments and words in channel order", () => {
    expect(merged.channels!.map((c) => c.channel)).toEqual([0, 1]);
    expect(merged.channels![0]!.text).toBe(left.text);
    expect(merged.channels![1]!.segments.map((s) => s.id)).toEqual([0, 1]);
    expect(merged.channels![1]!.words.every((w) => w.channel === 1)).toBe(true);
  });

  it("one channel (a mono clip asked for multichannel) is channel 0", () => {
    const one = mergeChannels([{ channel: 0, result: left }], 10);
    expect(one.channels).toHaveLength(1);
    expect(one.segments.every((s) => s.channel === 0)).toBe(true);
  });
});
