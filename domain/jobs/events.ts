import { diarizeOptions } from "../../schemas/diarization";
import { REDACT_ENTITIES } from "../../schemas/redact";
import { z } from "zod";
import { envelopeOf } from "../../schemas/envelope";
import { jobError, stepName } from "../../schemas/jobs";

/**
 * The job aggregate's events: stream JOBS, subject `<prefix>.job.evt.<workflowId>`,
 * written only through the job store (store.ts). Past tense, one discriminated union;
 * the envelope is validated on every write and read. Change an event by adding a new
 * version, never by editing its fields: the log keeps 30 days of old ones.
 */

/** A job's options as fixed at submission (after defaults and bounds). */
const jobSpec = z.object({
  workflowId: z.string().uuid(),
  requestId: z.string(),
  ownerId: z.string(),
  keyId: z.string(),
  audioUrl: z.string(),
  language: z.string().optional(),
  model: z.string(),
  prompt: z.string().optional(),
  /** `keyterms` (schemas/keyterms.ts); absent when none were given. */
  keyterms: z.array(z.string()).optional(),
  segmentSeconds: z.number().positive(),
  concurrency: z.number().int().positive(),
  webhookUrl: z.string().optional(),
  review: z.boolean(),
  /** Absent in jobs submitted before it existed: on, as the default is. */
  smartFormat: z.boolean().optional(),
  /** `redact` (docs/formatting.md): absent or empty, nothing is redacted. */
  redact: z.array(z.enum(REDACT_ENTITIES)).optional(),
  /** `redact_audio`: write redacted_audio.wav at aggregation. */
  redactAudio: z.boolean().optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  /** `diarize` with its count hint (docs/diarization.md): absent, no speaker labels. */
  diarize: diarizeOptions.optional(),
  /** `multichannel`: each channel sliced and transcribed on its own; absent in jobs before it existed. */
  multichannel: z.boolean().optional(),
  /** The plan's maxAudioSecondsPerRequest when the job was submitted. */
  maxAudioSeconds: z.number().nonnegative(),
});
export type JobSpec = z.infer<typeof jobSpec>;

/** One slice of the job's audio: absolute samples [startSample, endSample) of the decoded 16 kHz PCM. */
const chunkPlan = z.object({
  index: z.number().int().nonnegative(),
  startSample: z.number().int().nonnegative(),
  endSample: z.number().int().nonnegative(),
  /** `multichannel`: the channel of the slice; samples are then frames of the interleaved PCM. */
  channel: z.number().int().nonnegative().optional(),
});
export type ChunkPlan = z.infer<typeof chunkPlan>;

const at = z.string();

const jobEvent = z.discriminatedUnion("type", [
  z.object({ type: z.literal("JobSubmitted"), data: jobSpec.extend({ at }) }),
  /** A resubmission of an errored job: unfinished steps start again, finished ones stay. */
  z.object({ type: z.literal("JobResumed"), data: z.object({ attempt: z.number().int().positive(), at }) }),
  z.object({ type: z.literal("StepStarted"), data: z.object({ step: stepName, attempt: z.number().int().positive(), at }) }),
  /** One attempt of a step failed; `final` means no more attempts. */
  z.object({
    type: z.literal("StepAttemptFailed"),
    data: z.object({ step: stepName, attempt: z.number().int().positive(), delivery: z.number().int().positive(), error: jobError, final: z.boolean(), at }),
  }),
  z.object({
    type: z.literal("AudioFetched"),
    data: z.object({
      bytes: z.number().int().nonnegative(),
      contentType: z.string().optional(),
      sampleRate: z.number().int().positive(),
      samples: z.number().int().nonnegative(),
      durationSeconds: z.number().nonnegative(),
      /** Object key of the decoded 16 kHz mono PCM16LE audio (`channels` interleaved with multichannel). */
      audioKey: z.string(),
      /** `multichannel`: how many channels `audioKey` interleaves; `samples` are then frames. Absent: mono. */
      channels: z.number().int().positive().optional(),
      at,
    }),
  }),
  z.object({ type: z.literal("AudioSliced"), data: z.object({ chunks: z.array(chunkPlan).min(1), at }) }),
  z.object({
    type: z.literal("ChunkTranscribed"),
    data: z.object({
      index: z.number().int().nonnegative(),
      segments: z.number().int().nonnegative(),
      /** True when a stored checkpoint was reused instead of transcribing again. */
      fromCheckpoint: z.boolean(),
      workerId: z.string().optional(),
      at,
    }),
  }),
  z.object({ type: z.literal("TranscriptAggregated"), data: z.object({ segments: z.number().int().nonnegative(), at }) }),
  z.object({ type: z.literal("ChunkReviewed"), data: z.object({ index: z.number().int().nonnegative(), at }) }),
  z.object({ type: z.literal("TranscriptReviewed"), data: z.object({ at }) }),
  z.object({ type: z.literal("JobCompleted"), data: z.object({ audioSeconds: z.number().nonnegative(), at }) }),
  z.object({ type: z.literal("WebhookDelivered"), data: z.object({ attempt: z.number().int().positive(), status: z.number().int(), at }) }),
  z.object({ type: z.literal("JobFailed"), data: z.object({ error: jobError, step: stepName.optional(), at }) }),
  /** Cancelled by its owner (DELETE …/jobs/{id}): final; nothing is recorded for it afterwards. */
  z.object({ type: z.literal("JobTerminated"), data: z.object({ keyId: z.string(), at }) }),
]);
export type JobEvent = z.infer<typeof jobEvent>;
export const jobEventEnvelope = envelopeOf(jobEvent);
