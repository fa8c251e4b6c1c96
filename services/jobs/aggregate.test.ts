import { describe, expect, it } from "vitest";
import type { ChunkArtifact } from "../../schemas/jobs";
import type { JobSpec } from "../../domain/jobs/events";
import type { VerboseTranscription } from "../../schemas/transcription";
import { buildResult } from "./aggregate";
import type { ActiveJob } from "../../domain/jobs/decider";
import { segmentConfidence, toAbsoluteSegments } from "./transcribe-chunk";

const spec: JobSpec = {
  workflowId: "5b1f2a8e-7c1d-4d3e-9f00-000000000001",
  requestId: "r",
  ownerId: "o",
  keyId: "k",
  audioUrl: "https://a.example/x.wav",
  model: "stt-large-v3-turbo",
  segmentSeconds: 10,
  concurrency: 2,
  review: false,
  maxAudioSeconds: 900,
};
const job: ActiveJob = {
  status: "running",
  spec,
  submittedAt: "t",
  updatedAt: "t",
  resumes: 0,
  steps: {},
  attempts: {},
  audio: { bytes: 1, sampleRate: 16000, samples: 20 * 16000, durationSeconds: 20, audioKey: "k" },
  chunks: [
    { index: 0, startSample: 0, endSample: 10.4 * 16000 },
    { index: 1, startSample: 10.4 * 16000, endSample: 20 * 16000 },
  ],
};

const verbose = (segments: [number, number, string, number][], words: VerboseTranscription["words"] = []): VerboseTranscription => ({
  task: "transcribe",
  language: "en",
  duration: 10,
  text: segments.map((s) => s[2]).join(" "),
  segments: segments.map(([start, end, text, avg], id) => ({ id, seek: 0, start, end, text, tokens: [], temperature: 0, avg_logprob: avg, compression_ratio: 1, no_speech_prob: 0 })),
  words,
});

describe("slice results to absolute segments", () => {
  it("shifts by the slice start, clamps to the slice, drops empty text, rounds to 3 decimals", () => {
    const out = toAbsoluteSegments(verbose([[0.5, 2.25, " hello ", -0.1], [3, 3.5, "  ", -0.1], [9.9, 12, "tail", -0.2]]), 10.4, 20);
    expect(out).toEqual([
      { start_time: 10.9, end_time: 12.65, duration: 1.75, text: "hello", confidence: 0.905 },
      { start_time: 20, end_time: 20, duration: 0, text: "tail", confidence: 0.819 },
    ]);
  });

  it("takes confidence from word probabilities when the engine gives them", () => {
    const v = verbose([[0, 2, "a b", -5]], [
      { word: "a", start: 0, end: 1, probability: 0.9 },
      { word: "b", start: 1, end: 2, probability: 0.6 },
      { word: "c", start: 5, end: 6, probability: 0.1 },
    ]);
    expect(segmentConfidence(v, v.segments[0]!)).toBe(0.75);
  });
});

describe("aggregation", () => {
  const chunk = (index: number, segments: [number, number, string][]): ChunkArtifact => ({
    workflow_id: spec.workflowId,
    request_id: "r",
    index,
    start_time: index === 0 ? 0 : 10.4,
    end_time: index === 0 ? 10.4 : 20,
    language: "en",
    model: "m",
    text: "",
    segments: segments.map(([s, e, text]) => ({ start_time: s, end_time: e, duration: Math.round((e - s) * 1000) / 1000, text, confidence: 0.5 })),
    transcribed_at: "t",
  });

  it("merges chunks in order with ids from 0, monotonic starts and the summary of 2.5", () => {
    const result = buildResult(job, [chunk(1, [[11, 13, "three"], [15, 16.5, "four"]]), chunk(0, [[1, 3, "one"], [5, 6, "two"]])]);
    expect(result.segments.map((s) => [s.id, s.start_time, s.text])).toEqual([
      [0, 1, "one"],
      [1, 5, "two"],
      [2, 11, "three"],
      [3, 15, "four"],
    ]);
    expect(result.text).toBe("one two three four");
    expect(result.summary).toEqual({ total_duration: 20, total_speech_duration: 6.5, overall_speech_ratio: 0.325, num_segments: 4 });
    expect(result.metadata).toMatchObject({ language: "en", model: "stt-large-v3-turbo", chunk_count: 2, audio_duration_seconds: 20 });
  });

  it("an empty transcript still has a well-formed summary", () => {
    const result = buildResult(job, [chunk(0, []), chunk(1, [])]);
    expect(result.summary).toEqual({ total_duration: 20, total_speech_duration: 0, overall_speech_ratio: 0, num_segments: 0 });
  });
});

describe("multichannel aggregation", () => {
  const stereo: ActiveJob = {
    ...job,
    spec: { ...spec, multichannel: true },
    audio: { ...job.audio!, channels: 2 },
    chunks: [
      { index: 0, startSample: 0, endSample: 20 * 16000, channel: 0 },
      { index: 1, startSample: 0, endSample: 20 * 16000, channel: 1 },
    ],
  };
  const chunk = (index: number, channel: number, segments: [number, number, string][]): ChunkArtifact => ({
    workflow_id: spec.workflowId,
    request_id: "r",
    index,
    start_time: 0,
    end_time: 20,
    language: "en",
    model: "m",
    channel,
    text: segments.map((s) => s[2]).join(" "),
    segments: segments.map(([start_time, end_time, text]) => ({ start_time, end_time, duration: end_time - start_time, text, confidence: 0.9, channel })),
    transcribed_at: "t",
  });

  it("merges the channels' segments in time order, each labelled, and keeps each channel's own", () => {
    const r = buildResult(stereo, [chunk(1, 1, [[2, 4, "she had"], [6, 8, "dark suit"]]), chunk(0, 0, [[0, 3, "and so"], [6, 9, "ask not"]])]);
    expect(r.segments.map((s) => [s.id, s.channel, s.start_time])).toEqual([
      [0, 0, 0],
      [1, 1, 2],
      [2, 0, 6],
      [3, 1, 6],
    ]);
    expect(r.text).toBe("and so she had ask not dark suit");
    expect(r.channels).toEqual([
      { channel: 0, text: "and so ask not", segments: [r.segments[0], r.segments[2]] },
      { channel: 1, text: "she had dark suit", segments: [r.segments[1], r.segments[3]] },
    ]);
  });

  it("a mono job has no channels and no labels", () => {
    const r = buildResult(job, []);
    expect(r.channels).toBeUndefined();
  });
});
