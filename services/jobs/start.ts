import { AppError } from "../../shared/errors";
import type { RunningService, ServiceContext } from "../context";
import { aggregateTranscript } from "./aggregate";
import { fetchAudio } from "./fetch-audio";
import { stepChunkIndex, type ActiveJob } from "../../domain/jobs/decider";
import type { JobStore } from "../../domain/jobs/store";
import { startProcessManager } from "./process-manager";
import { embeddedReviewer, llmReviewer, reviewChunk, reviewTranscript } from "./review";
import { createAligner } from "./review-acoustic";
import { startRetentionSweep } from "./retention";
import { sliceAudio } from "./slice-audio";
import { exponentialBackoff, startStepConsumer, type StepConsumerOptions } from "./step-consumer";
import { createFairSlots, createOwnerShare } from "./fetch-slots";
import { transcribeChunk } from "./transcribe-chunk";
import type { StepCommand, StepKind } from "../../schemas/jobs";

/**
 * The batch-job services. Each is its own durable consumer and can run in its own
 * process with any number of replicas:
 *
 * - jobs-manager      the process manager (job events → next step commands)
 * - jobs-fetcher      download + decode (job.cmd.fetch)
 * - jobs-slicer       silence-aware boundaries (job.cmd.slice)
 * - jobs-transcriber  one slice → worker router → chunk checkpoint (job.cmd.transcribe)
 * - jobs-aggregator   chunk checkpoints → result.json (job.cmd.aggregate)
 * - jobs-reviewer     the two review stages, LLM or embedded (job.cmd.review)
 *
 * Webhook delivery is services/webhooks.
 */

const nowIso = (ctx: ServiceContext) => ctx.now().toISOString();

async function startJobManager(ctx: ServiceContext): Promise<RunningService> {
  const pm = await startProcessManager({
    nats: ctx.nats,
    store: ctx.jobs,
    logger: ctx.logger.child({ service: "jobs-manager" }),
    now: ctx.now,
    // The embedded reviewer needs no model, so a review can always run.
    reviewAvailable: true,
    db: ctx.db,
    stallAfterMs: Math.max(10 * 60_000, 20 * ctx.config.jobs.stepAckWaitMs),
    usage: ctx.usage,
  });
  const retention = startRetentionSweep(
    { db: ctx.db, objects: ctx.objects, logger: ctx.logger.child({ service: "jobs-manager" }), now: ctx.now },
    ctx.config.jobs.retentionDays,
    60 * 60_000,
  );
  return {
    name: "jobs-manager",
    stop: async () => {
      retention.stop();
      await pm.stop();
    },
  };
}

type StepRunner = (ctx: ServiceContext, store: JobStore) => (job: ActiveJob, command: StepCommand, signal: AbortSignal) => Promise<void>;

function stepService(
  name: string,
  kind: StepKind,
  concurrency: (ctx: ServiceContext) => number,
  runner: StepRunner,
  extra: Pick<StepConsumerOptions, "admit" | "abortWhenJobEnds"> = {},
) {
  return async (ctx: ServiceContext): Promise<RunningService> => {
    const store = ctx.jobs;
    const jobs = ctx.config.jobs;
    const consumer = await startStepConsumer({
      nats: ctx.nats,
      store,
      logger: ctx.logger.child({ service: name }),
      kind,
      concurrency: concurrency(ctx),
      maxAttempts: jobs.stepMaxAttempts,
      ackWaitMs: jobs.stepAckWaitMs,
      backoffMs: exponentialBackoff(500, 30_000),
      now: ctx.now,
      run: runner(ctx, store),
      ...extra,
    });
    return { name, stop: consumer.stop };
  };
}

/**
 * The fetcher holds JOB_FETCH_CONCURRENCY downloads, at most half of them one owner's,
 * and decodes JOB_DECODE_CONCURRENCY at a time (fetch-slots.ts); a DELETE of the job
 * closes its download in flight (abortWhenJobEnds).
 */
async function startJobFetcher(ctx: ServiceContext): Promise<RunningService> {
  const jobs = ctx.config.jobs;
  const share = createOwnerShare(jobs.fetchConcurrency);
  const decodes = createFairSlots(jobs.decodeConcurrency);
  return stepService(
    "jobs-fetcher",
    "fetch",
    () => jobs.fetchConcurrency,
    (ctx, store) => async (job, command, signal) => {
      const audio = await fetchAudio(job, {
        objects: ctx.objects,
        allowPrivate: jobs.allowPrivateUrls,
        maxBytes: jobs.fetchMaxBytes,
        timeoutMs: jobs.fetchTimeoutMs,
        minBytesPerSecond: jobs.fetchMinBytesPerSecond,
        minRateWindowMs: jobs.fetchMinRateWindowMs,
        decodeSlot: (owner, signal) => decodes.acquire(owner, signal),
        signal,
      });
      await store.execute(command.workflowId, { type: "RecordAudioFetched", audio, now: nowIso(ctx) });
    },
    { admit: (job) => share.tryTake(job.spec.ownerId), abortWhenJobEnds: true },
  )(ctx);
}

const startJobSlicer = stepService("jobs-slicer", "slice", () => 4, (ctx, store) => async (job, command) => {
  const chunks = await sliceAudio(job, ctx.objects);
  await store.execute(command.workflowId, { type: "RecordAudioSliced", chunks, now: nowIso(ctx) });
});

export const startJobTranscriber = stepService(
  "jobs-transcriber",
  "transcribe",
  (ctx) => ctx.config.jobs.transcribeConcurrency,
  (ctx, store) => async (job, command, signal) => {
    const router = ctx.router;
    if (!router) throw new AppError("unavailable", "workers_unavailable", "no transcription workers are configured");
    const index = stepChunkIndex(command.step)!;
    const outcome = await transcribeChunk(job, index, { objects: ctx.objects, router, now: ctx.now, signal });
    await store.execute(command.workflowId, { type: "RecordChunkTranscribed", index, ...outcome, now: nowIso(ctx) });
  },
);

const startJobAggregator = stepService("jobs-aggregator", "aggregate", () => 4, (ctx, store) => async (job, command) => {
  const result = await aggregateTranscript(job, ctx.objects);
  await store.execute(command.workflowId, { type: "RecordTranscriptAggregated", segments: result.segments.length, now: nowIso(ctx) });
});

async function startJobReviewer(ctx: ServiceContext): Promise<RunningService> {
  // The embedded reviewer's acoustic check: one ps-worker process of this replica's
  // own, started on the first check and stopped when idle (and with the service).
  const aligner = createAligner();
  const llm = ctx.config.jobs.review;
  const reviewer = llm ? llmReviewer(llm) : embeddedReviewer(aligner);
  const service = await stepService("jobs-reviewer", "review", () => 4, (ctx, store) => async (job, command, signal) => {
    const index = stepChunkIndex(command.step);
    if (index !== undefined) {
      await reviewChunk(job, index, ctx.objects, reviewer, ctx.now, signal);
      await store.execute(command.workflowId, { type: "RecordChunkReviewed", index, now: nowIso(ctx) });
    } else {
      await reviewTranscript(job, ctx.objects, reviewer, ctx.now, signal);
      await store.execute(command.workflowId, { type: "RecordTranscriptReviewed", now: nowIso(ctx) });
    }
  })(ctx);
  return {
    name: service.name,
    stop: async () => {
      await service.stop();
      await aligner.close();
    },
  };
}

/** Every job service, for services/stt/services.ts. */
export const jobServiceDefs = [
  { name: "jobs-manager", start: startJobManager },
  { name: "jobs-fetcher", start: startJobFetcher },
  { name: "jobs-slicer", start: startJobSlicer },
  { name: "jobs-transcriber", start: startJobTranscriber },
  { name: "jobs-aggregator", start: startJobAggregator },
  { name: "jobs-reviewer", start: startJobReviewer },
];
