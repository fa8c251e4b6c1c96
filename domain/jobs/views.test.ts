import { describe, expect, it } from "vitest";
import { evolve, initialJobState, type ActiveJob, type JobState } from "./decider";
import type { JobEvent } from "./events";
import { slicingView, stepsView } from "./views";
import { fetched, given, now, sliced, spec, started, submitted, transcribed } from "./test-fixtures";

describe("the poll view", () => {
  it("lists steps in pipeline order with status, attempt and times", () => {
    const state = [submitted, started("fetch"), fetched, started("slice"), sliced, started("transcribe_chunk_1"), started("transcribe_chunk_0"), transcribed(0)].reduce<JobState>(evolve, initialJobState);
    if (state.status === "none") throw new Error("no job");
    expect(state.status).toBe("running");
    expect(stepsView(state).map((s) => [s.name, s.status])).toEqual([
      ["fetch", "complete"],
      ["slice", "complete"],
      ["transcribe_chunk_0", "complete"],
      ["transcribe_chunk_1", "running"],
    ]);
    expect(stepsView(state)[0]).toMatchObject({ attempt: 1, started_at: now, ended_at: now, error: null });
  });
});

describe("the slicing view", () => {
  const plan = (n: number) => Array.from({ length: n }, (_, index) => ({ index, startSample: index * 16000, endSample: (index + 1) * 16000 }));

  it("shows the requested and the used slice length in the view", () => {
    const long: JobEvent = {
      type: "AudioFetched",
      data: { bytes: 1000, sampleRate: 16000, samples: 1800 * 16000, durationSeconds: 1800, audioKey: "transcription/req-1/audio.pcm", at: now },
    };
    const oneSecond: JobEvent = { type: "JobSubmitted", data: { ...spec, segmentSeconds: 1, at: now } };
    expect(slicingView(given(oneSecond).state as ActiveJob)).toEqual({ requested_segment_seconds: 1, segment_seconds: null, max_chunks: 100, chunk_count: null });
    const sliced100: JobEvent = { type: "AudioSliced", data: { chunks: plan(100), at: now } };
    expect(slicingView(given(oneSecond, started("fetch"), long, started("slice"), sliced100).state as ActiveJob)).toEqual({
      requested_segment_seconds: 1,
      segment_seconds: 18,
      max_chunks: 100,
      chunk_count: 100,
    });
    // under the cap the requested length is the used one
    expect(slicingView(given(submitted, started("fetch"), fetched).state as ActiveJob).segment_seconds).toBe(10);
  });
});

describe("the steps view's order", () => {
  const error = { code: "transcription_failed", message: "x" };

  it("the poll view orders every kind of step, chunk steps by number (10 after 2)", () => {
    const chunks = Array.from({ length: 11 }, (_, index) => ({ index, startSample: index * 16000, endSample: (index + 1) * 16000 }));
    const s = [
      submitted,
      started("webhook"),
      started("review"),
      started("review_chunk_10"),
      started("review_chunk_2"),
      started("aggregate"),
      started("transcribe_chunk_10"),
      started("transcribe_chunk_2"),
      started("slice"),
      started("fetch"),
      { type: "AudioSliced", data: { chunks, at: now } } as JobEvent,
      { type: "StepAttemptFailed", data: { step: "review", attempt: 1, delivery: 1, error, final: true, at: "2026-11-22T10:09:00.000Z" } } as JobEvent,
    ].reduce<JobState>(evolve, initialJobState);
    if (s.status === "none") throw new Error("no job");
    const view = stepsView(s);
    expect(view.map((v) => v.name)).toEqual(["fetch", "slice", "transcribe_chunk_2", "transcribe_chunk_10", "aggregate", "review_chunk_2", "review_chunk_10", "review", "webhook"]);
    expect(view.find((v) => v.name === "review")).toEqual({ name: "review", status: "errored", attempt: 1, started_at: now, ended_at: "2026-11-22T10:09:00.000Z", error });
    expect(view.find((v) => v.name === "fetch")).toEqual({ name: "fetch", status: "running", attempt: 1, started_at: now, ended_at: null, error: null });
  });
});
