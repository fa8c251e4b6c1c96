import type { JobError } from "../../schemas/jobs";
import { AppError, notFound, validationError } from "../../shared/errors";
import type { ChunkPlan, JobEvent, JobSpec } from "./events";
import { MAX_CHUNKS } from "./slicing";

/**
 * The job aggregate: pure `decide(command, state) → events` and
 * `evolve(state, event) → state`. Time comes in with every command (`now`), ids with
 * the spec; nothing here does I/O.
 *
 * The lifecycle: JobSubmitted → StepStarted(fetch) → AudioFetched → StepStarted(slice)
 * → AudioSliced(n) → StepStarted(transcribe_chunk_i)… → ChunkTranscribed(i)… →
 * StepStarted(aggregate) → TranscriptAggregated → [review_chunk_i…, review] →
 * JobCompleted → [StepStarted(webhook) → WebhookDelivered]. Any step's final failure
 * ends in JobFailed, except the webhook's: a job is complete whether or not its
 * receiver answers.
 *
 * `Advance` is the process manager's command: it looks at the state and starts
 * whatever may start now, never more than `concurrency` chunk steps at once. Because
 * the decision is made from the aggregate (and appended with an expected sequence),
 * the bound holds however many transcriber replicas run.
 */

type StepStatus = "running" | "retrying" | "complete" | "errored";

interface StepState {
  status: StepStatus;
  attempt: number;
  startedAt: string;
  /** Last event about this step (start or failed attempt), for stall detection. */
  touchedAt?: string;
  /** Failed attempts of the current dispatch. */
  failures?: number;
  endedAt?: string;
  error?: JobError;
}

export interface AudioInfo {
  bytes: number;
  contentType?: string;
  sampleRate: number;
  samples: number;
  durationSeconds: number;
  audioKey: string;
  /** Channels interleaved in `audioKey` (multichannel); absent: mono. */
  channels?: number;
}

export interface ActiveJob {
  status: "queued" | "running" | "complete" | "errored" | "terminated";
  spec: JobSpec;
  submittedAt: string;
  /** How many times an errored job was resubmitted. */
  resumes: number;
  steps: Record<string, StepState>;
  /** Last attempt number per step, kept across resumes. */
  attempts: Record<string, number>;
  audio?: AudioInfo;
  chunks?: ChunkPlan[];
  error?: JobError;
  updatedAt: string;
}

export type JobState = { status: "none" } | ActiveJob;
export const initialJobState: JobState = { status: "none" };

export type JobCommand =
  | { type: "SubmitJob"; spec: JobSpec; now: string }
  | {
      type: "Advance";
      now: string;
      reviewAvailable: boolean;
      /**
       * Steps in flight with no news since before this instant are started again (next
       * attempt): their command was lost. A step that was only slow is unharmed: its
       * lease keeps the new command waiting and its checkpoint ends it.
       */
      stalledBefore?: string;
    }
  | { type: "RecordAudioFetched"; audio: AudioInfo; now: string }
  | { type: "RecordAudioSliced"; chunks: ChunkPlan[]; now: string }
  | { type: "RecordChunkTranscribed"; index: number; segments: number; fromCheckpoint: boolean; workerId?: string; now: string }
  | { type: "RecordTranscriptAggregated"; segments: number; now: string }
  | { type: "RecordChunkReviewed"; index: number; now: string }
  | { type: "RecordTranscriptReviewed"; now: string }
  | { type: "RecordWebhookDelivered"; attempt: number; status: number; now: string }
  | { type: "RecordStepAttemptFailed"; step: string; attempt: number; delivery: number; error: JobError; final: boolean; now: string }
  | { type: "CancelJob"; keyId: string; now: string };

export const transcribeStep = (i: number) => `transcribe_chunk_${i}`;
export const reviewChunkStep = (i: number) => `review_chunk_${i}`;

/** Which consumer runs a step: `transcribe_chunk_3` → `transcribe`. */
export function stepKind(step: string): "fetch" | "slice" | "transcribe" | "aggregate" | "review" | "webhook" {
  if (step.startsWith("transcribe_chunk_")) return "transcribe";
  if (step.startsWith("review_chunk_") || step === "review") return "review";
  if (step === "fetch" || step === "slice" || step === "aggregate" || step === "webhook") return step;
  throw validationError("invalid_step", `unknown step ${step}`);
}

/** The chunk index of a per-chunk step, or undefined. */
export function stepChunkIndex(step: string): number | undefined {
  const m = /_chunk_(\d+)$/.exec(step);
  return m ? Number(m[1]) : undefined;
}

function requireJob(state: JobState): ActiveJob {
  if (state.status === "none") throw notFound("job_not_found", "no such job");
  return state;
}

const isDone = (job: ActiveJob, step: string) => job.steps[step]?.status === "complete";
const inFlight = (s: StepState | undefined) => s !== undefined && (s.status === "running" || s.status === "retrying");

function requireChunk(job: ActiveJob, index: number): void {
  if (!job.chunks || index >= job.chunks.length) throw validationError("invalid_chunk", `chunk ${index} does not exist`);
}

export function decide(command: JobCommand, state: JobState): JobEvent[] {
  // A terminated job is final: a step that finishes after the cancel records nothing,
  // and a resubmission of its request_id is the same (terminated) job.
  if (state.status === "terminated") return [];
  switch (command.type) {
    case "SubmitJob": {
      if (state.status === "none") return [{ type: "JobSubmitted", data: { ...command.spec, at: command.now } }];
      // Job ids are derived from (owner, request_id), so this is a guard, not a path the
      // gateway takes: one tenant's submission never lands on another tenant's job.
      if (state.spec.ownerId !== command.spec.ownerId) {
        throw new AppError("conflict", "request_id_conflict", "this request_id is already used by another job", { retryable: false });
      }
      // Resubmitting a failed job resumes it from its checkpoints; otherwise it is the same job.
      if (state.status === "errored") return [{ type: "JobResumed", data: { attempt: state.resumes + 2, at: command.now } }];
      return [];
    }
    case "Advance":
      return state.status === "none" ? [] : advance(state, command.now, command.reviewAvailable, command.stalledBefore);
    case "RecordAudioFetched": {
      const job = requireJob(state);
      if (isDone(job, "fetch")) return [];
      const events: JobEvent[] = [{ type: "AudioFetched", data: { ...command.audio, at: command.now } }];
      if (command.audio.durationSeconds > job.spec.maxAudioSeconds && job.status !== "errored") {
        events.push({
          type: "JobFailed",
          data: {
            step: "fetch",
            error: {
              code: "audio_too_long",
              message: `the audio is ${command.audio.durationSeconds.toFixed(1)} s; this plan allows at most ${job.spec.maxAudioSeconds} s per request`,
            },
            at: command.now,
          },
        });
      }
      return events;
    }
    case "RecordAudioSliced": {
      const job = requireJob(state);
      if (isDone(job, "slice")) return [];
      if (command.chunks.length === 0) throw validationError("invalid_slices", "a job has at least one chunk");
      // The slicer keeps to the cap (slicing.ts); the aggregate refuses anything past it.
      if (command.chunks.length > MAX_CHUNKS) throw validationError("too_many_slices", `a job has at most ${MAX_CHUNKS} chunks, not ${command.chunks.length}`);
      return [{ type: "AudioSliced", data: { chunks: command.chunks, at: command.now } }];
    }
    case "RecordChunkTranscribed": {
      const job = requireJob(state);
      requireChunk(job, command.index);
      if (isDone(job, transcribeStep(command.index))) return [];
      const { index, segments, fromCheckpoint, workerId } = command;
      return [{ type: "ChunkTranscribed", data: { index, segments, fromCheckpoint, ...(workerId ? { workerId } : {}), at: command.now } }];
    }
    case "RecordTranscriptAggregated": {
      const job = requireJob(state);
      if (isDone(job, "aggregate")) return [];
      return [{ type: "TranscriptAggregated", data: { segments: command.segments, at: command.now } }];
    }
    case "RecordChunkReviewed": {
      const job = requireJob(state);
      requireChunk(job, command.index);
      if (isDone(job, reviewChunkStep(command.index))) return [];
      return [{ type: "ChunkReviewed", data: { index: command.index, at: command.now } }];
    }
    case "RecordTranscriptReviewed": {
      const job = requireJob(state);
      if (isDone(job, "review")) return [];
      return [{ type: "TranscriptReviewed", data: { at: command.now } }];
    }
    case "RecordWebhookDelivered": {
      const job = requireJob(state);
      if (isDone(job, "webhook")) return [];
      return [{ type: "WebhookDelivered", data: { attempt: command.attempt, status: command.status, at: command.now } }];
    }
    case "RecordStepAttemptFailed": {
      const job = requireJob(state);
      const current = job.steps[command.step];
      // A late failure report of a step that has since succeeded (or of an older dispatch) changes nothing.
      if (current?.status === "complete" || current?.status === "errored") return [];
      if (!current || current.attempt !== command.attempt) return [];
      const { step, attempt, delivery, error, final } = command;
      const events: JobEvent[] = [{ type: "StepAttemptFailed", data: { step, attempt, delivery, error, final, at: command.now } }];
      if (final && step !== "webhook" && job.status !== "errored" && job.status !== "complete") {
        events.push({ type: "JobFailed", data: { step, error, at: command.now } });
      }
      return events;
    }
    case "CancelJob": {
      const job = requireJob(state);
      if (job.status === "complete" || job.status === "errored") {
        throw new AppError("conflict", "job_not_cancellable", `the job is already ${job.status}; only queued or running jobs can be cancelled`, { retryable: false });
      }
      return [{ type: "JobTerminated", data: { keyId: command.keyId, at: command.now } }];
    }
    default: {
      const never: never = command;
      throw new Error(`unknown command ${JSON.stringify(never)}`);
    }
  }
}

function advance(job: ActiveJob, now: string, reviewAvailable: boolean, stalledBefore?: string): JobEvent[] {
  if (job.status === "errored") return [];
  const start = (step: string): JobEvent => ({ type: "StepStarted", data: { step, attempt: (job.attempts[step] ?? 0) + 1, at: now } });
  if (stalledBefore && job.status !== "complete") {
    const stalled = Object.entries(job.steps)
      .filter(([name, s]) => name !== "webhook" && inFlight(s) && (s.touchedAt ?? s.startedAt) < stalledBefore)
      .map(([name]) => start(name));
    if (stalled.length > 0) return stalled;
  }
  if (job.status === "complete") {
    return job.spec.webhookUrl && !job.steps.webhook ? [start("webhook")] : [];
  }
  if (job.spec.review && !reviewAvailable) {
    return [
      {
        type: "JobFailed",
        data: { error: { code: "review_unavailable", message: "review was requested but no review model is configured (REVIEW_LLM_URL)" }, at: now },
      },
    ];
  }
  if (!job.steps.fetch) return [start("fetch")];
  if (!isDone(job, "fetch")) return [];
  if (!job.steps.slice) return [start("slice")];
  if (!isDone(job, "slice") || !job.chunks) return [];

  const perChunk = (stepOf: (i: number) => string): { events: JobEvent[]; allDone: boolean } => {
    const chunks = job.chunks!;
    let running = chunks.filter((c) => inFlight(job.steps[stepOf(c.index)])).length;
    const events: JobEvent[] = [];
    for (const c of chunks) {
      if (running >= job.spec.concurrency) break;
      if (!job.steps[stepOf(c.index)]) {
        events.push(start(stepOf(c.index)));
        running++;
      }
    }
    return { events, allDone: chunks.every((c) => isDone(job, stepOf(c.index))) };
  };

  const transcribe = perChunk(transcribeStep);
  if (!transcribe.allDone) return transcribe.events;
  if (!job.steps.aggregate) return [start("aggregate")];
  if (!isDone(job, "aggregate")) return [];
  if (job.spec.review) {
    const review = perChunk(reviewChunkStep);
    if (!review.allDone) return review.events;
    if (!job.steps.review) return [start("review")];
    if (!isDone(job, "review")) return [];
  }
  // billed per channel, as the segment plane (docs/jobs-reference.md "Multichannel")
  const completed: JobEvent = { type: "JobCompleted", data: { audioSeconds: (job.audio?.durationSeconds ?? 0) * (job.audio?.channels ?? 1), at: now } };
  return job.spec.webhookUrl && !job.steps.webhook ? [completed, start("webhook")] : [completed];
}

function completeStep(job: ActiveJob, step: string, at: string): Record<string, StepState> {
  const previous = job.steps[step];
  return {
    ...job.steps,
    [step]: { status: "complete", attempt: previous?.attempt ?? job.attempts[step] ?? 1, startedAt: previous?.startedAt ?? at, endedAt: at },
  };
}

export function evolve(state: JobState, event: JobEvent): JobState {
  if (event.type === "JobSubmitted") {
    if (state.status !== "none") return state;
    const { at, ...spec } = event.data;
    return { status: "queued", spec, submittedAt: at, resumes: 0, steps: {}, attempts: {}, updatedAt: at };
  }
  if (state.status === "none") return state;
  const job: ActiveJob = { ...state, updatedAt: event.data.at };
  switch (event.type) {
    case "JobResumed": {
      const steps = Object.fromEntries(Object.entries(job.steps).filter(([, s]) => s.status === "complete"));
      const { error: _dropped, ...rest } = job;
      return { ...rest, status: "queued", resumes: job.resumes + 1, steps };
    }
    case "StepStarted":
      return {
        ...job,
        status: job.status === "queued" ? "running" : job.status,
        steps: { ...job.steps, [event.data.step]: { status: "running", attempt: event.data.attempt, startedAt: event.data.at, touchedAt: event.data.at } },
        attempts: { ...job.attempts, [event.data.step]: event.data.attempt },
      };
    case "StepAttemptFailed": {
      const previous = job.steps[event.data.step];
      return {
        ...job,
        steps: {
          ...job.steps,
          [event.data.step]: {
            status: event.data.final ? "errored" : "retrying",
            attempt: event.data.attempt,
            startedAt: previous?.startedAt ?? event.data.at,
            touchedAt: event.data.at,
            failures: (previous?.attempt === event.data.attempt ? (previous.failures ?? 0) : 0) + 1,
            ...(event.data.final ? { endedAt: event.data.at } : {}),
            error: event.data.error,
          },
        },
      };
    }
    case "AudioFetched": {
      const { at, ...audio } = event.data;
      return { ...job, audio, steps: completeStep(job, "fetch", at) };
    }
    case "AudioSliced":
      return { ...job, chunks: event.data.chunks, steps: completeStep(job, "slice", event.data.at) };
    case "ChunkTranscribed":
      return { ...job, steps: completeStep(job, transcribeStep(event.data.index), event.data.at) };
    case "TranscriptAggregated":
      return { ...job, steps: completeStep(job, "aggregate", event.data.at) };
    case "ChunkReviewed":
      return { ...job, steps: completeStep(job, reviewChunkStep(event.data.index), event.data.at) };
    case "TranscriptReviewed":
      return { ...job, steps: completeStep(job, "review", event.data.at) };
    case "JobCompleted":
      return { ...job, status: "complete" };
    case "WebhookDelivered":
      return { ...job, steps: completeStep(job, "webhook", event.data.at) };
    case "JobFailed":
      return job.status === "terminated" ? job : { ...job, status: "errored", error: event.data.error };
    case "JobTerminated":
      return { ...job, status: "terminated" };
    default: {
      const never: never = event;
      throw new Error(`unknown event ${JSON.stringify(never)}`);
    }
  }
}
