import { describe, expect, it } from "vitest";
import type { AppError } from "../../shared/errors";
import { decide, evolve, initialJobState, stepChunkIndex, stepKind, type JobCommand, type JobState } from "./decider";
import type { JobEvent } from "./events";
import { advance, fetched, given, now, sliced, spec, started, submitted, transcribed } from "./test-fixtures";

describe("submitting", () => {
  it("a new request starts a job", () => {
    given().when({ type: "SubmitJob", spec, now }).then([submitted]);
  });
  it("the same request again is the same job: no new events", () => {
    given(submitted).when({ type: "SubmitJob", spec, now }).then([]);
  });
  it("another tenant cannot take over a request_id", () => {
    given(submitted).when({ type: "SubmitJob", spec: { ...spec, ownerId: "tenant-b" }, now }).thenThrows("request_id_conflict");
  });
  it("resubmitting an errored job resumes it, keeping finished steps", () => {
    const failed: JobEvent = { type: "JobFailed", data: { step: "transcribe_chunk_2", error: { code: "transcription_failed", message: "x" }, at: now } };
    const g = given(submitted, started("fetch"), fetched, started("slice"), sliced, started("transcribe_chunk_0"), transcribed(0), started("transcribe_chunk_2"), failed);
    g.when({ type: "SubmitJob", spec, now }).then([{ type: "JobResumed", data: { attempt: 2, at: now } }]);
    const resumed = evolve(g.state, { type: "JobResumed", data: { attempt: 2, at: now } });
    expect(resumed.status).toBe("queued");
    // chunk 0 stays done; chunk 2 restarts with a new attempt number; chunk 1 starts fresh.
    expect(decide(advance, resumed)).toEqual([started("transcribe_chunk_1"), started("transcribe_chunk_2", 2)]);
  });
});

describe("resubmitting a job that is not errored", () => {
  const all = [submitted, started("fetch"), fetched, started("slice"), sliced, ...[0, 1, 2, 3].flatMap((i) => [started(`transcribe_chunk_${i}`), transcribed(i)])];
  const aggregated: JobEvent = { type: "TranscriptAggregated", data: { segments: 8, at: now } };
  const completed: JobEvent = { type: "JobCompleted", data: { audioSeconds: 40, at: now } };

  it("a completed job is the same job: no resume, nothing runs again", () => {
    const done = given(...all, started("aggregate"), aggregated, completed);
    expect(done.state.status).toBe("complete");
    done.when({ type: "SubmitJob", spec, now: "2026-11-22T11:00:00.000Z" }).then([]);
    // and the process manager finds nothing to start on it
    done.when(advance).then([]);
  });

  it("a queued or running job is the same job: resubmitting neither resumes nor restarts it", () => {
    given(submitted).when({ type: "SubmitJob", spec, now }).then([]);
    given(...all.slice(0, 6)).when({ type: "SubmitJob", spec, now }).then([]);
  });

  it("a job resumed twice counts its attempts on (resumes + 2)", () => {
    const failed: JobEvent = { type: "JobFailed", data: { step: "fetch", error: { code: "fetch_failed", message: "x" }, at: now } };
    const resumed: JobEvent = { type: "JobResumed", data: { attempt: 2, at: now } };
    given(submitted, started("fetch"), failed, resumed, started("fetch", 2), failed)
      .when({ type: "SubmitJob", spec, now })
      .then([{ type: "JobResumed", data: { attempt: 3, at: now } }]);
  });
});

describe("advancing (the process manager's decision)", () => {
  it("starts fetch, then slice, one at a time", () => {
    given(submitted).when(advance).then([started("fetch")]);
    given(submitted, started("fetch")).when(advance).then([]);
    given(submitted, started("fetch"), fetched).when(advance).then([started("slice")]);
  });

  it("keeps at most `concurrency` chunks in flight", () => {
    const base = [submitted, started("fetch"), fetched, started("slice"), sliced];
    given(...base).when(advance).then([started("transcribe_chunk_0"), started("transcribe_chunk_1")]);
    given(...base, started("transcribe_chunk_0"), started("transcribe_chunk_1")).when(advance).then([]);
    given(...base, started("transcribe_chunk_0"), started("transcribe_chunk_1"), transcribed(1)).when(advance).then([started("transcribe_chunk_2")]);
    // A chunk being retried still counts as in flight.
    const retrying: JobEvent = {
      type: "StepAttemptFailed",
      data: { step: "transcribe_chunk_0", attempt: 1, delivery: 1, error: { code: "transcription_failed", message: "x" }, final: false, at: now },
    };
    given(...base, started("transcribe_chunk_0"), started("transcribe_chunk_1"), retrying, transcribed(1), started("transcribe_chunk_2")).when(advance).then([]);
  });

  it("aggregates once every chunk is done, then completes and starts the webhook", () => {
    const all = [submitted, started("fetch"), fetched, started("slice"), sliced, ...[0, 1, 2, 3].flatMap((i) => [started(`transcribe_chunk_${i}`), transcribed(i)])];
    given(...all).when(advance).then([started("aggregate")]);
    const aggregated: JobEvent = { type: "TranscriptAggregated", data: { segments: 8, at: now } };
    given(...all, started("aggregate"), aggregated).when(advance).then([{ type: "JobCompleted", data: { audioSeconds: 40, at: now } }]);
    const withHook = { ...submitted, data: { ...submitted.data, webhookUrl: "https://hooks.example/x" } } as JobEvent;
    const g = given(withHook, ...all.slice(1), started("aggregate"), aggregated);
    g.when(advance).then([{ type: "JobCompleted", data: { audioSeconds: 40, at: now } }, started("webhook")]);
  });

  it("runs the two review stages before completing when review is on", () => {
    const reviewing = { ...submitted, data: { ...submitted.data, review: true } } as JobEvent;
    const all = [reviewing, started("fetch"), fetched, started("slice"), sliced, ...[0, 1, 2, 3].flatMap((i) => [started(`transcribe_chunk_${i}`), transcribed(i)]), started("aggregate"), { type: "TranscriptAggregated", data: { segments: 8, at: now } } as JobEvent];
    given(...all).when(advance).then([started("review_chunk_0"), started("review_chunk_1")]);
    const reviewed = [0, 1, 2, 3].flatMap((i) => [started(`review_chunk_${i}`), { type: "ChunkReviewed", data: { index: i, at: now } } as JobEvent]);
    given(...all, ...reviewed).when(advance).then([started("review")]);
    given(...all, ...reviewed, started("review"), { type: "TranscriptReviewed", data: { at: now } }).when(advance).then([{ type: "JobCompleted", data: { audioSeconds: 40, at: now } }]);
  });

  it("fails a review job at once when no review model is configured", () => {
    const reviewing = { ...submitted, data: { ...submitted.data, review: true } } as JobEvent;
    const [event] = given(reviewing).when({ ...advance, reviewAvailable: false }).events();
    expect(event).toMatchObject({ type: "JobFailed", data: { error: { code: "review_unavailable" } } });
  });

  it("starts a stalled in-flight step again with the next attempt", () => {
    const base = [submitted, started("fetch"), fetched, started("slice"), sliced, started("transcribe_chunk_0"), started("transcribe_chunk_1"), transcribed(1), started("transcribe_chunk_2")];
    given(...base).when({ ...advance, stalledBefore: "2026-11-22T09:00:00.000Z" }).then([]);
    given(...base).when({ ...advance, stalledBefore: "2026-11-22T11:00:00.000Z" }).then([started("transcribe_chunk_0", 2), started("transcribe_chunk_2", 2)]);
  });

  it("does nothing for errored jobs", () => {
    given(submitted, { type: "JobFailed", data: { error: { code: "x", message: "y" }, at: now } }).when(advance).then([]);
  });
});

describe("recording step results", () => {
  it("records a chunk once: a repeated report is a no-op", () => {
    const base = [submitted, started("fetch"), fetched, started("slice"), sliced, started("transcribe_chunk_0")];
    given(...base).when({ type: "RecordChunkTranscribed", index: 0, segments: 2, fromCheckpoint: false, now }).then([transcribed(0)]);
    given(...base, transcribed(0)).when({ type: "RecordChunkTranscribed", index: 0, segments: 2, fromCheckpoint: true, now }).then([]);
    given(...base).when({ type: "RecordChunkTranscribed", index: 9, segments: 2, fromCheckpoint: false, now }).thenThrows("invalid_chunk");
  });

  it("fails the job when audio is longer than the plan allows", () => {
    const long = { bytes: 1, sampleRate: 16000, samples: 16000 * 1000, durationSeconds: 1000, audioKey: "k" };
    const events = given(submitted, started("fetch")).when({ type: "RecordAudioFetched", audio: long, now }).events();
    expect(events.map((e) => e.type)).toEqual(["AudioFetched", "JobFailed"]);
    expect(events[1]).toMatchObject({ data: { error: { code: "audio_too_long" } } });
  });

  it("a final step failure fails the job; a retry only marks the step", () => {
    const error = { code: "audio_not_found", message: "404" };
    const g = given(submitted, started("fetch"));
    g.when({ type: "RecordStepAttemptFailed", step: "fetch", attempt: 1, delivery: 1, error, final: false, now }).then([
      { type: "StepAttemptFailed", data: { step: "fetch", attempt: 1, delivery: 1, error, final: false, at: now } },
    ]);
    g.when({ type: "RecordStepAttemptFailed", step: "fetch", attempt: 1, delivery: 3, error, final: true, now }).then([
      { type: "StepAttemptFailed", data: { step: "fetch", attempt: 1, delivery: 3, error, final: true, at: now } },
      { type: "JobFailed", data: { step: "fetch", error, at: now } },
    ]);
    // A stale report from an older dispatch changes nothing.
    g.when({ type: "RecordStepAttemptFailed", step: "fetch", attempt: 7, delivery: 1, error, final: true, now }).then([]);
  });

  it("a failed webhook never fails a completed job", () => {
    const withHook = { ...submitted, data: { ...submitted.data, webhookUrl: "https://h.example/" } } as JobEvent;
    const done: JobEvent = { type: "JobCompleted", data: { audioSeconds: 40, at: now } };
    const error = { code: "webhook_failed", message: "503" };
    given(withHook, done, started("webhook"))
      .when({ type: "RecordStepAttemptFailed", step: "webhook", attempt: 1, delivery: 5, error, final: true, now })
      .then([{ type: "StepAttemptFailed", data: { step: "webhook", attempt: 1, delivery: 5, error, final: true, at: now } }]);
  });
});

describe("cancelling", () => {
  const cancel: JobCommand = { type: "CancelJob", keyId: "key-a", now };
  const terminated: JobEvent = { type: "JobTerminated", data: { keyId: "key-a", at: now } };

  it("a queued or running job is terminated", () => {
    given(submitted).when(cancel).then([terminated]);
    given(submitted, started("fetch"), fetched, started("slice"), sliced, started("transcribe_chunk_0")).when(cancel).then([terminated]);
  });

  it("after it nothing is recorded or started, and a resubmission is the same job", () => {
    const after = given(submitted, started("fetch"), fetched, started("slice"), sliced, started("transcribe_chunk_0"), terminated);
    expect(after.state.status).toBe("terminated");
    after.when({ type: "RecordChunkTranscribed", index: 0, segments: 1, fromCheckpoint: false, now }).then([]);
    after.when(advance).then([]);
    after.when({ type: "RecordStepAttemptFailed", step: "transcribe_chunk_0", attempt: 1, delivery: 1, error: { code: "x", message: "x" }, final: true, now }).then([]);
    after.when({ type: "SubmitJob", spec, now }).then([]);
    after.when(cancel).then([]);
  });

  it("a complete or errored job cannot be cancelled", () => {
    given(submitted, { type: "JobCompleted", data: { audioSeconds: 40, at: now } }).when(cancel).thenThrows("job_not_cancellable");
    given(submitted, { type: "JobFailed", data: { error: { code: "x", message: "x" }, at: now } }).when(cancel).thenThrows("job_not_cancellable");
  });
});

describe("slice cap in the aggregate", () => {
  const plan = (n: number) => Array.from({ length: n }, (_, index) => ({ index, startSample: index * 16000, endSample: (index + 1) * 16000 }));

  it("refuses a slice plan with more than MAX_CHUNKS chunks and records one at the cap", () => {
    const running = given(submitted, started("fetch"), fetched, started("slice"));
    running.when({ type: "RecordAudioSliced", chunks: plan(101), now }).thenThrows("too_many_slices");
    running.when({ type: "RecordAudioSliced", chunks: plan(100), now }).then([{ type: "AudioSliced", data: { chunks: plan(100), at: now } }]);
  });
});

describe("rules the process manager and the poll view lean on", () => {
  const error = { code: "transcription_failed", message: "x" };
  const base = [submitted, started("fetch"), fetched, started("slice"), sliced];

  it("names a step's consumer and chunk", () => {
    expect(["fetch", "slice", "transcribe_chunk_12", "aggregate", "review_chunk_0", "review", "webhook"].map(stepKind)).toEqual([
      "fetch",
      "slice",
      "transcribe",
      "aggregate",
      "review",
      "review",
      "webhook",
    ]);
    expect(() => stepKind("transcribe")).toThrow(expect.objectContaining({ code: "invalid_step" }));
    expect(() => stepKind("reviews")).toThrow(expect.objectContaining({ code: "invalid_step" }));
    expect(stepChunkIndex("transcribe_chunk_12")).toBe(12);
    expect(stepChunkIndex("review_chunk_3")).toBe(3);
    expect(stepChunkIndex("aggregate")).toBeUndefined();
    expect(stepChunkIndex("transcribe_chunk_1x")).toBeUndefined();
  });

  it("a stalled step is one whose last news is strictly older than the bound; the webhook and a complete job's steps are never restarted", () => {
    const at = (iso: string, e: JobEvent): JobEvent => ({ ...e, data: { ...e.data, at: iso } }) as JobEvent;
    const t0 = "2026-11-22T10:00:00.000Z";
    const t1 = "2026-11-22T10:05:00.000Z";
    const retried: JobEvent = { type: "StepAttemptFailed", data: { step: "transcribe_chunk_1", attempt: 1, delivery: 1, error, final: false, at: t1 } };
    const g = given(...base, at(t0, started("transcribe_chunk_0")), at(t0, started("transcribe_chunk_1")), retried);
    // exactly at the bound: not stalled
    g.when({ ...advance, stalledBefore: t0 }).then([]);
    // chunk 1 failed an attempt at t1 (news): only chunk 0 is stalled
    g.when({ ...advance, stalledBefore: "2026-11-22T10:01:00.000Z" }).then([started("transcribe_chunk_0", 2)]);
    g.when({ ...advance, stalledBefore: "2026-11-22T10:06:00.000Z" }).then([started("transcribe_chunk_0", 2), started("transcribe_chunk_1", 2)]);
    // a running webhook is the delivery consumer's, with its own retries
    const withHook = { ...submitted, data: { ...submitted.data, webhookUrl: "https://hooks.example/x" } } as JobEvent;
    given(withHook, { type: "JobCompleted", data: { audioSeconds: 40, at: now } }, started("webhook")).when({ ...advance, stalledBefore: "2026-11-22T11:00:00.000Z" }).then([]);
    // a step left running on a complete job is not started again
    given(...base, started("transcribe_chunk_0"), { type: "JobCompleted", data: { audioSeconds: 40, at: now } }).when({ ...advance, stalledBefore: "2026-11-22T11:00:00.000Z" }).then([]);
  });

  it("a completed step's report again is a no-op, at every step", () => {
    const all = [...base, ...[0, 1, 2, 3].flatMap((i) => [started(`transcribe_chunk_${i}`), transcribed(i)])];
    const aggregated: JobEvent = { type: "TranscriptAggregated", data: { segments: 8, at: now } };
    given(...base).when({ type: "RecordAudioFetched", audio: { bytes: 1, sampleRate: 16000, samples: 16000, durationSeconds: 1, audioKey: "k" }, now }).then([]);
    given(...base).when({ type: "RecordAudioSliced", chunks: [{ index: 0, startSample: 0, endSample: 1 }], now }).then([]);
    given(...all, started("aggregate"), aggregated).when({ type: "RecordTranscriptAggregated", segments: 8, now }).then([]);
    given(...all, started("aggregate")).when({ type: "RecordTranscriptAggregated", segments: 8, now }).then([aggregated]);
    const reviewed: JobEvent = { type: "ChunkReviewed", data: { index: 1, at: now } };
    given(...all, started("review_chunk_1"), reviewed).when({ type: "RecordChunkReviewed", index: 1, now }).then([]);
    given(...all, started("review_chunk_1")).when({ type: "RecordChunkReviewed", index: 1, now }).then([reviewed]);
    given(...all).when({ type: "RecordChunkReviewed", index: 4, now }).thenThrows("invalid_chunk");
    given(...all, { type: "TranscriptReviewed", data: { at: now } }).when({ type: "RecordTranscriptReviewed", now }).then([]);
    given(...all).when({ type: "RecordTranscriptReviewed", now }).then([{ type: "TranscriptReviewed", data: { at: now } }]);
    const delivered: JobEvent = { type: "WebhookDelivered", data: { attempt: 2, status: 204, at: now } };
    given(...all, started("webhook"), delivered).when({ type: "RecordWebhookDelivered", attempt: 3, status: 200, now }).then([]);
    given(...all, started("webhook")).when({ type: "RecordWebhookDelivered", attempt: 2, status: 204, now }).then([delivered]);
    // a chunk report carries the worker that did it, when told
    given(...base, started("transcribe_chunk_0"))
      .when({ type: "RecordChunkTranscribed", index: 0, segments: 3, fromCheckpoint: true, workerId: "w-1", now })
      .then([{ type: "ChunkTranscribed", data: { index: 0, segments: 3, fromCheckpoint: true, workerId: "w-1", at: now } }]);
  });

  it("refuses an empty slicing, and reports on a job that does not exist", () => {
    given(submitted, started("fetch"), fetched, started("slice")).when({ type: "RecordAudioSliced", chunks: [], now }).thenThrows("invalid_slices");
    given().when({ type: "RecordChunkTranscribed", index: 0, segments: 1, fromCheckpoint: false, now }).thenThrows("job_not_found");
    given().when({ type: "CancelJob", keyId: "key-a", now }).thenThrows("job_not_found");
    given().when(advance).then([]);
  });

  it("audio over the plan's length: the message names both; an errored job is not failed twice", () => {
    const long = { bytes: 1, sampleRate: 16000, samples: 16000 * 1000, durationSeconds: 1000.04, audioKey: "k" };
    const [, failed] = given(submitted, started("fetch")).when({ type: "RecordAudioFetched", audio: long, now }).events();
    expect(failed).toEqual({ type: "JobFailed", data: { step: "fetch", error: { code: "audio_too_long", message: "the audio is 1000.0 s; this plan allows at most 900 s per request" }, at: now } });
    // exactly the limit is allowed
    given(submitted, started("fetch")).when({ type: "RecordAudioFetched", audio: { ...long, durationSeconds: 900 }, now }).then([{ type: "AudioFetched", data: { ...long, durationSeconds: 900, at: now } }]);
    const errored = given(submitted, started("fetch"), { type: "JobFailed", data: { step: "slice", error, at: now } });
    expect(errored.when({ type: "RecordAudioFetched", audio: long, now }).events().map((e) => e.type)).toEqual(["AudioFetched"]);
  });

  it("a failure report for a step that finished, failed for good or never started changes nothing; a final one on an errored or complete job only marks the step", () => {
    const fail = (step: string, attempt = 1, final = true): JobCommand => ({ type: "RecordStepAttemptFailed", step, attempt, delivery: 1, error, final, now });
    given(...base).when(fail("fetch")).then([]); // complete
    given(...base).when(fail("transcribe_chunk_0")).then([]); // never started
    const finalFail: JobEvent = { type: "StepAttemptFailed", data: { step: "transcribe_chunk_0", attempt: 1, delivery: 1, error, final: true, at: now } };
    given(...base, started("transcribe_chunk_0"), finalFail).when(fail("transcribe_chunk_0")).then([]); // errored
    const marked = [{ type: "StepAttemptFailed", data: { step: "transcribe_chunk_1", attempt: 1, delivery: 1, error, final: true, at: now } }];
    given(...base, started("transcribe_chunk_0"), started("transcribe_chunk_1"), finalFail, { type: "JobFailed", data: { step: "transcribe_chunk_0", error, at: now } })
      .when(fail("transcribe_chunk_1"))
      .then(marked as JobEvent[]);
    given(...base, started("transcribe_chunk_1"), { type: "JobCompleted", data: { audioSeconds: 40, at: now } })
      .when(fail("transcribe_chunk_1"))
      .then(marked as JobEvent[]);
  });

  it("evolve: a second JobSubmitted is ignored; failed attempts are counted per dispatch; a resume keeps only finished steps and drops the error", () => {
    const s1 = given(submitted, { type: "JobSubmitted", data: { ...spec, requestId: "other", at: "2026-11-22T12:00:00.000Z" } }).state;
    expect(s1).toMatchObject({ status: "queued", submittedAt: now, spec: { requestId: "req-1" }, resumes: 0 });
    const failedOnce: JobEvent = { type: "StepAttemptFailed", data: { step: "fetch", attempt: 1, delivery: 1, error, final: false, at: "2026-11-22T10:01:00.000Z" } };
    const failedTwice: JobEvent = { type: "StepAttemptFailed", data: { step: "fetch", attempt: 1, delivery: 2, error, final: false, at: "2026-11-22T10:02:00.000Z" } };
    const s2 = given(submitted, started("fetch"), failedOnce, failedTwice).state;
    expect(s2.status !== "none" && s2.steps.fetch).toEqual({ status: "retrying", attempt: 1, startedAt: now, touchedAt: "2026-11-22T10:02:00.000Z", failures: 2, error });
    const s3 = given(submitted, started("fetch"), failedOnce, started("fetch", 2), { ...failedOnce, data: { ...failedOnce.data, attempt: 2, final: true } }).state;
    expect(s3.status !== "none" && s3.steps.fetch).toMatchObject({ status: "errored", attempt: 2, failures: 1, endedAt: "2026-11-22T10:01:00.000Z" });
    const failed: JobEvent = { type: "JobFailed", data: { step: "transcribe_chunk_1", error, at: now } };
    const s4 = given(...base, started("transcribe_chunk_0"), transcribed(0), started("transcribe_chunk_1"), failed, { type: "JobResumed", data: { attempt: 2, at: now } }).state;
    if (s4.status === "none") throw new Error("no job");
    expect(s4.status).toBe("queued");
    expect(s4.resumes).toBe(1);
    expect(s4.error).toBeUndefined();
    expect(Object.keys(s4.steps).sort()).toEqual(["fetch", "slice", "transcribe_chunk_0"]);
    expect(s4.attempts.transcribe_chunk_1).toBe(1);
    // a JobFailed after the cancel leaves the job terminated
    const s5 = given(submitted, { type: "JobTerminated", data: { keyId: "key-a", at: now } }, failed).state;
    expect(s5.status).toBe("terminated");
    // a step started again keeps the job running
    const s6 = given(...base, started("transcribe_chunk_0"), started("transcribe_chunk_0", 2)).state;
    expect(s6.status).toBe("running");
  });

  it("review chunks are bounded by the job's concurrency too", () => {
    const reviewing = { ...submitted, data: { ...submitted.data, review: true } } as JobEvent;
    const all = [reviewing, ...base.slice(1), ...[0, 1, 2, 3].flatMap((i) => [started(`transcribe_chunk_${i}`), transcribed(i)]), started("aggregate"), { type: "TranscriptAggregated", data: { segments: 8, at: now } } as JobEvent];
    given(...all, started("review_chunk_0"), started("review_chunk_1")).when(advance).then([]);
    given(...all, started("review_chunk_0"), started("review_chunk_1"), { type: "ChunkReviewed", data: { index: 0, at: now } }).when(advance).then([started("review_chunk_2")]);
  });
});

describe("waiting on a running step, and steps recorded without a start", () => {
  const all = [submitted, started("fetch"), fetched, started("slice"), sliced, ...[0, 1, 2, 3].flatMap((i) => [started(`transcribe_chunk_${i}`), transcribed(i)])];
  const aggregated: JobEvent = { type: "TranscriptAggregated", data: { segments: 8, at: now } };

  it("nothing starts while slicing, aggregation or the final review is still running", () => {
    given(submitted, started("fetch"), fetched, started("slice")).when(advance).then([]);
    given(...all, started("aggregate")).when(advance).then([]);
    const reviewing = { ...submitted, data: { ...submitted.data, review: true } } as JobEvent;
    const reviewed = [0, 1, 2, 3].flatMap((i) => [started(`review_chunk_${i}`), { type: "ChunkReviewed", data: { index: i, at: now } } as JobEvent]);
    given(reviewing, ...all.slice(1), started("aggregate"), aggregated, ...reviewed, started("review")).when(advance).then([]);
  });

  it("a complete job whose webhook start was lost starts it; one whose webhook started does not again", () => {
    const withHook = { ...submitted, data: { ...submitted.data, webhookUrl: "https://hooks.example/x" } } as JobEvent;
    const done: JobEvent = { type: "JobCompleted", data: { audioSeconds: 40, at: now } };
    given(withHook, ...all.slice(1), started("aggregate"), aggregated, done).when(advance).then([started("webhook")]);
    given(withHook, ...all.slice(1), started("aggregate"), aggregated, done, started("webhook")).when(advance).then([]);
  });

  it("a step recorded without its start (a report after a resume) is complete at attempt 1 or its last attempt, started when it ended", () => {
    const t = "2026-11-22T10:30:00.000Z";
    const s1 = evolve(evolve(initialJobState, submitted), { ...fetched, data: { ...fetched.data, at: t } } as JobEvent);
    expect(s1.status !== "none" && s1.steps.fetch).toEqual({ status: "complete", attempt: 1, startedAt: t, endedAt: t });
    const failed: JobEvent = { type: "JobFailed", data: { step: "transcribe_chunk_1", error: { code: "x", message: "x" }, at: now } };
    const resumed = [submitted, started("fetch"), fetched, started("slice"), sliced, started("transcribe_chunk_1", 1), started("transcribe_chunk_1", 2), failed, { type: "JobResumed", data: { attempt: 2, at: now } } as JobEvent].reduce<JobState>(evolve, initialJobState);
    const s2 = evolve(resumed, { ...transcribed(1), data: { ...transcribed(1).data, at: t } } as JobEvent);
    expect(s2.status !== "none" && s2.steps.transcribe_chunk_1).toEqual({ status: "complete", attempt: 2, startedAt: t, endedAt: t });
  });

  it("events for a job that was never submitted are ignored", () => {
    expect(evolve(initialJobState, started("fetch"))).toEqual({ status: "none" });
    expect(evolve(initialJobState, { type: "JobCompleted", data: { audioSeconds: 1, at: now } })).toEqual({ status: "none" });
  });
});

describe("slicing, a stall check with nothing stalled, and what refusals say", () => {
  it("records the slicing once", () => {
    const chunks = [{ index: 0, startSample: 0, endSample: 160000 }];
    given(submitted, started("fetch"), fetched, started("slice")).when({ type: "RecordAudioSliced", chunks, now }).then([{ type: "AudioSliced", data: { chunks, at: now } }]);
  });

  it("a stall check that finds nothing stalled goes on to start what may start", () => {
    given(submitted, started("fetch"), fetched).when({ ...advance, stalledBefore: "2026-11-22T09:00:00.000Z" }).then([started("slice")]);
  });

  it("refusals say what is wrong; a conflict or a cancel too late is not worth retrying", () => {
    const thrown = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        const err = e as AppError;
        return { code: err.code, message: err.message, retryable: err.retryable, status: err.status };
      }
      throw new Error("did not throw");
    };
    expect(thrown(() => stepKind("nope"))).toMatchObject({ code: "invalid_step", message: "unknown step nope" });
    expect(thrown(() => decide({ type: "RecordAudioFetched", audio: { bytes: 1, sampleRate: 16000, samples: 1, durationSeconds: 1, audioKey: "k" }, now }, initialJobState))).toMatchObject({ code: "job_not_found", message: "no such job", status: 404 });
    const base = given(submitted, started("fetch"), fetched, started("slice"), sliced).state;
    expect(thrown(() => decide({ type: "RecordChunkTranscribed", index: 4, segments: 1, fromCheckpoint: false, now }, base))).toMatchObject({ code: "invalid_chunk", message: "chunk 4 does not exist" });
    expect(thrown(() => decide({ type: "SubmitJob", spec: { ...spec, ownerId: "tenant-b" }, now }, base))).toEqual({ code: "request_id_conflict", message: "this request_id is already used by another job", retryable: false, status: 409 });
    const done = given(submitted, { type: "JobCompleted", data: { audioSeconds: 1, at: now } }).state;
    expect(thrown(() => decide({ type: "CancelJob", keyId: "key-a", now }, done))).toEqual({ code: "job_not_cancellable", message: "the job is already complete; only queued or running jobs can be cancelled", retryable: false, status: 409 });
    const reviewing = { ...submitted, data: { ...submitted.data, review: true } } as JobEvent;
    expect(given(reviewing).when({ ...advance, reviewAvailable: false }).events()).toEqual([
      { type: "JobFailed", data: { error: { code: "review_unavailable", message: "review was requested but no review model is configured (REVIEW_LLM_URL)" }, at: now } },
    ]);
  });
});
