import { expect } from "vitest";
import { decide, evolve, initialJobState, type JobCommand, type JobState } from "./decider";
import type { JobEvent, JobSpec } from "./events";

/**
 * A job and its usual events, and the given/when/then helper, shared by the unit tests
 * of the decider and of the poll views (decider.test.ts, views.test.ts).
 */

export const now = "2026-11-22T10:00:00.000Z";
export const spec: JobSpec = {
  workflowId: "5b1f2a8e-7c1d-4d3e-9f00-000000000001",
  requestId: "req-1",
  ownerId: "tenant-a",
  keyId: "key-a",
  audioUrl: "https://audio.example/a.wav",
  model: "stt-large-v3-turbo",
  segmentSeconds: 10,
  concurrency: 2,
  review: false,
  maxAudioSeconds: 900,
};

/** given(events).when(command).then(events) */
export function given(...events: JobEvent[]) {
  const state = events.reduce<JobState>(evolve, initialJobState);
  return {
    state,
    when: (command: JobCommand) => ({
      then: (expected: JobEvent[]) => expect(decide(command, state)).toEqual(expected),
      thenThrows: (code: string) => expect(() => decide(command, state)).toThrow(expect.objectContaining({ code })),
      events: () => decide(command, state),
    }),
  };
}

export const submitted: JobEvent = { type: "JobSubmitted", data: { ...spec, at: now } };
export const started = (step: string, attempt = 1): JobEvent => ({ type: "StepStarted", data: { step, attempt, at: now } });
export const fetched: JobEvent = {
  type: "AudioFetched",
  data: { bytes: 1000, sampleRate: 16000, samples: 40 * 16000, durationSeconds: 40, audioKey: "transcription/req-1/audio.pcm", at: now },
};
export const sliced: JobEvent = {
  type: "AudioSliced",
  data: {
    chunks: [0, 1, 2, 3].map((index) => ({ index, startSample: index * 160000, endSample: (index + 1) * 160000 })),
    at: now,
  },
};
export const transcribed = (index: number): JobEvent => ({ type: "ChunkTranscribed", data: { index, segments: 2, fromCheckpoint: false, at: now } });
export const advance: Extract<JobCommand, { type: "Advance" }> = { type: "Advance", now, reviewAvailable: true };
