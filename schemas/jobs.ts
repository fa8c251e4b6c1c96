import { z } from "zod";
import { speakerCount } from "./diarization";
import { keytermsJson } from "./keyterms";
import { redactList } from "./redact";
import { legacyWorkflowIdFor } from "./job-ids";
import { safeJsonObject, safeString, type FreeJsonLimits } from "./safe-string";

/**
 * Batch jobs (spec 1, 2.4–2.7, 3.1, 4.3, 4.4, 6.2): the HTTP bodies, the step commands
 * (`<prefix>.job.cmd.<kind>.<workflowId>`), the stored artifacts, the poll view and the
 * webhook body. The job aggregate's events are domain/jobs/events.ts; the shapes they
 * share with these (errors, step names) are defined here.
 */

// ---------------------------------------------------------------- HTTP: submit

const httpUrl = (field: string) =>
  safeString(4096, { error: `${field} must be a string` })
    .trim()
    .min(1, `${field} is required`)
    .refine((v) => {
      try {
        const u = new URL(v);
        return (u.protocol === "http:" || u.protocol === "https:") && /^https?:\/\//i.test(v);
      } catch {
        return false;
      }
    }, `${field} must be an http:// or https:// URL`);

/** request_id doubles as an object-store prefix, so it is limited to a safe alphabet. */
const requestIdPattern = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/**
 * Bounds of `metadata`: it travels in the JobSubmitted event, is stored as `jsonb` in the
 * read model and is forwarded to the review stage and the webhook (docs/jobs.md).
 */
const metadataLimits: FreeJsonLimits = { maxBytes: 64 * 1024, maxDepth: 16, maxKeyChars: 256 };

/**
 * Every string of the body becomes part of the JobSubmitted event, so each one is a
 * safeString: refused at the edge when Postgres could not store it (schemas/safe-string.ts).
 */
export const submitJobBody = z.object({
  audio_url: httpUrl("audio_url"),
  request_id: safeString(128, { error: "request_id must be a string" })
    .regex(requestIdPattern, "request_id must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
    .optional(),
  language: safeString(32).trim().min(1).optional(),
  model: safeString(128).trim().min(1).optional(),
  prompt: safeString(8000).optional(),
  /** Recognition favours these (schemas/keyterms.ts): ["Dashwood", "prudently"] or "Dashwood,prudently". */
  keyterms: keytermsJson.optional(),
  segment_seconds: z.number({ error: "segment_seconds must be a number" }).gt(0, "segment_seconds must be > 0").finite().optional(),
  /** Accepted and ignored: every slice is transcribed as verbose_json (spec 4.3). */
  response_format: safeString(64).optional(),
  concurrency: z.number({ error: "concurrency must be a number" }).gt(0, "concurrency must be > 0").finite().optional(),
  webhook_url: httpUrl("webhook_url").optional(),
  review: z.boolean({ error: "review must be a boolean" }).optional(),
  /** Default true: punctuation, capitals and numerals for engines whose text lacks them (docs/jobs.md). */
  smart_format: z.boolean({ error: "smart_format must be a boolean" }).optional(),
  /** PII/PCI redaction (docs/formatting.md "Redaction"): "pci,ssn" or ["pci", "ssn"]. */
  redact: redactList.optional(),
  /** With `redact`: also write redacted_audio.wav, the audio with each redacted span silenced. */
  redact_audio: z.boolean({ error: "redact_audio must be a boolean" }).optional(),
  metadata: safeJsonObject(metadataLimits, { error: "metadata must be an object" }).optional(),
  /** Speaker labels (docs/diarization.md): segments carry `speaker`, and `speaker_role` where `metadata.speaker_roles` names it. */
  diarize: z.boolean({ error: "diarize must be a boolean" }).optional(),
  speakers: speakerCount("speakers").optional(),
  min_speakers: speakerCount("min_speakers").optional(),
  max_speakers: speakerCount("max_speakers").optional(),
  /** Each audio channel transcribed on its own, billed per channel (docs/jobs-reference.md "Multichannel"). */
  multichannel: z.boolean({ error: "multichannel must be a boolean" }).optional(),
});

export const submitJobResponse = z.object({
  request_id: z.string(),
  workflow_id: z.string().uuid(),
  status: z.literal("queued"),
  endpoint: z.string(),
});
export type SubmitJobResponse = z.infer<typeof submitJobResponse>;

/** Defaults and bounds of a job's options, in one place. */
export const jobDefaults = {
  model: "stt-large-v3-turbo",
  segmentSeconds: 300,
  concurrency: 6,
  /** Slices shorter than this would only multiply overhead; smaller values are raised to it. */
  minSegmentSeconds: 1,
  /**
   * Larger values are lowered to it: a transcription step holds its slice's PCM in
   * memory (16 kHz × 2 bytes, 19 MB for 600 s) and a replica runs several at once, so a
   * slice as long as the file (`segment_seconds: 14400`, 461 MB) is not allowed.
   */
  maxSegmentSeconds: 600,
  /** Per-job concurrency is capped so one job cannot take every worker. */
  maxConcurrency: 32,
  /**
   * At most this many slices per job: the effective slice length is
   * max(segment_seconds, duration / maxChunks) (domain/jobs/slicing.ts). Every slice
   * costs a few events, a worker call and a checkpoint whatever its length, so without
   * it `segment_seconds: 1` on a 4-hour file would make 14,400 slices.
   */
  maxChunks: 100,
} as const;

// ---------------------------------------------------------------- steps and their commands

export const jobError = z.object({ code: z.string(), message: z.string() });
export type JobError = z.infer<typeof jobError>;

/**
 * Step names: `fetch`, `slice`, `transcribe_chunk_<i>`, `aggregate`,
 * `review_chunk_<i>`, `review`, `webhook`.
 */
export const stepName = z.string().regex(/^(fetch|slice|aggregate|review|webhook|(transcribe|review)_chunk_\d+)$/);

/** The command a step consumer receives: which job, which step, which dispatch. */
const stepKinds = ["fetch", "slice", "transcribe", "aggregate", "review", "webhook"] as const;
export type StepKind = (typeof stepKinds)[number];
export const stepCommand = z.object({
  workflowId: z.string().uuid(),
  step: stepName,
  attempt: z.number().int().positive(),
});
export type StepCommand = z.infer<typeof stepCommand>;

// ---------------------------------------------------------------- artifacts (2.7)

const jobSegment = z.object({
  id: z.number().int().nonnegative(),
  start_time: z.number(),
  end_time: z.number(),
  duration: z.number(),
  text: z.string(),
  confidence: z.number().min(0).max(1),
  /** With `diarize`: the segment's speaker (0, 1, …) and, where `metadata.speaker_roles` names it, its role. */
  speaker: z.number().int().nonnegative().optional(),
  speaker_role: z.string().optional(),
  /** `multichannel`: the audio channel (0-based) of the segment. */
  channel: z.number().int().nonnegative().optional(),
});
export type JobSegment = z.infer<typeof jobSegment>;

/** A redacted span's time on the job's timeline and its entity label, never its words. */
const redactedSpan = z.object({ start_time: z.number(), end_time: z.number(), entity: z.string() });
export type RedactedSpan = z.infer<typeof redactedSpan>;

/** chunk_{i}.json in the job's artifact folder: one slice's result, times absolute. */
export const chunkArtifact = z.object({
  workflow_id: z.string(),
  request_id: z.string(),
  index: z.number().int().nonnegative(),
  start_time: z.number(),
  end_time: z.number(),
  language: z.string(),
  model: z.string(),
  worker_id: z.string().optional(),
  /** `multichannel`: the channel this slice is of. */
  channel: z.number().int().nonnegative().optional(),
  text: z.string(),
  segments: z.array(jobSegment.omit({ id: true })),
  /** With `redact`: where the slice's redacted words were spoken (for redacted_audio.wav). */
  redacted_spans: z.array(redactedSpan).optional(),
  transcribed_at: z.string(),
});
export type ChunkArtifact = z.infer<typeof chunkArtifact>;

/** diarization.json: the job's speaker turns over its whole audio (services/jobs/diarize-job.ts). */
export const diarizationArtifact = z.object({
  workflow_id: z.string(),
  diarizer: z.string(),
  turns: z.array(z.object({ start: z.number(), end: z.number(), speaker: z.number().int().nonnegative() })),
});

/** result.json and `output.result` (spec 2.5). */
export const jobResult = z.object({
  text: z.string(),
  segments: z.array(jobSegment),
  /** `multichannel`: each channel's text and segments (the segments' ids are those of the merged `segments`). */
  channels: z.array(z.object({ channel: z.number().int().nonnegative(), text: z.string(), segments: z.array(jobSegment) })).optional(),
  summary: z.object({
    total_duration: z.number(),
    total_speech_duration: z.number(),
    overall_speech_ratio: z.number(),
    num_segments: z.number().int(),
  }),
  metadata: z.object({
    language: z.string(),
    model: z.string(),
    chunk_count: z.number().int(),
    audio_duration_seconds: z.number(),
    request_id: z.string(),
    workflow_id: z.string(),
  }),
});
export type JobResult = z.infer<typeof jobResult>;

/** review_chunk_{i}.json: the first review stage's annotations of one slice. */
export const reviewChunkArtifact = z.object({
  index: z.number().int().nonnegative(),
  model: z.string(),
  corrections: z.array(z.object({ segment_id: z.number().int(), text: z.string(), reason: z.string().optional() })),
  /** The embedded reviewer's evidence: every candidate span, applied or not (word span [start_word, end_word)). */
  annotations: z
    .array(
      z.object({
        segment_id: z.number().int(),
        start_word: z.number().int().nonnegative(),
        end_word: z.number().int().positive(),
        original: z.string(),
        suggestion: z.string(),
        reason: z.string(),
        confidence: z.number().min(0).max(1),
      }),
    )
    .optional(),
  notes: z.string(),
  reviewed_at: z.string(),
});
export type ReviewChunkArtifact = z.infer<typeof reviewChunkArtifact>;

/** reviewed_result.json: the final corrected transcript (same shape as result plus review info). */
export const reviewedResult = jobResult.extend({
  /** `reviewer`: which one ran; `model`: "embedded" or the LLM's model name. */
  review: z.object({ reviewer: z.enum(["embedded", "llm"]).optional(), model: z.string(), corrected_segments: z.number().int(), notes: z.string(), reviewed_at: z.string() }),
});
export type ReviewedResult = z.infer<typeof reviewedResult>;

/** What names a job's artifact folder: its id and its request_id (a JobSpec fits). */
export interface ArtifactOwner {
  workflowId: string;
  requestId: string;
}

/**
 * A job's artifact folder. Spec 2.7 puts artifacts under `transcription/{request_id}/`;
 * request_ids are per tenant, so two tenants' jobs may share that prefix and each
 * gets its own folder below it, named by the job id:
 * `transcription/{request_id}/{workflow_id}/`. Jobs submitted before the scoping (their
 * id is the legacy one) keep the flat folder they were written to.
 */
export function artifactPrefix(job: ArtifactOwner): string {
  const flat = `transcription/${job.requestId}/`;
  return job.workflowId === legacyWorkflowIdFor(job.requestId) ? flat : `${flat}${job.workflowId}/`;
}

export const artifactKeys = {
  prefix: artifactPrefix,
  audio: (job: ArtifactOwner) => `${artifactPrefix(job)}audio.pcm`,
  chunk: (job: ArtifactOwner, i: number) => `${artifactPrefix(job)}chunk_${i}.json`,
  result: (job: ArtifactOwner) => `${artifactPrefix(job)}result.json`,
  reviewChunk: (job: ArtifactOwner, i: number) => `${artifactPrefix(job)}review_chunk_${i}.json`,
  reviewed: (job: ArtifactOwner) => `${artifactPrefix(job)}reviewed_result.json`,
  redactedAudio: (job: ArtifactOwner) => `${artifactPrefix(job)}redacted_audio.wav`,
  diarization: (job: ArtifactOwner) => `${artifactPrefix(job)}diarization.json`,
};

// ---------------------------------------------------------------- poll view (2.4)

const jobStatus = z.enum(["queued", "running", "complete", "errored", "terminated", "paused", "waiting"]);
export type JobStatus = z.infer<typeof jobStatus>;

const stepStatus = z.enum(["running", "retrying", "complete", "errored"]);
const jobStepView = z.object({
  name: z.string(),
  status: stepStatus,
  attempt: z.number().int(),
  started_at: z.string().nullable(),
  ended_at: z.string().nullable(),
  error: jobError.nullable(),
});
export type JobStepView = z.infer<typeof jobStepView>;

/**
 * How the job is sliced. A job makes at most `max_chunks` slices, so the slice length
 * used is max(requested, duration / max_chunks): known once the audio is fetched.
 */
const jobSlicingView = z.object({
  requested_segment_seconds: z.number(),
  /** The slice length used; null until the audio's duration is known. */
  segment_seconds: z.number().nullable(),
  max_chunks: z.number().int(),
  /** Slices made; null until the slice step has run. */
  chunk_count: z.number().int().nullable(),
});
export type JobSlicingView = z.infer<typeof jobSlicingView>;

export const jobView = z.object({
  workflow_id: z.string(),
  request_id: z.string(),
  status: jobStatus,
  steps: z.array(jobStepView),
  slicing: jobSlicingView,
  output: z.object({ result: jobResult, reviewed_result: reviewedResult.nullable() }).nullable(),
  error: jobError.nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type JobView = z.infer<typeof jobView>;

/** The webhook body (documented in docs/jobs.md). */
const webhookPayload = z.object({
  type: z.literal("transcription.job.completed"),
  workflow_id: z.string(),
  request_id: z.string(),
  status: z.literal("complete"),
  output: z.object({ result: jobResult, reviewed_result: reviewedResult.nullable() }),
  metadata: z.record(z.string(), z.unknown()).nullable(),
});
export type WebhookPayload = z.infer<typeof webhookPayload>;
