import type { JsMsg } from "@nats-io/jetstream";
import { ack, retry, runConsumer, terminate, type Outcome } from "../../shared/consumer";
import { AppError, toAppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import { ensureConsumer, type Nats } from "../../shared/nats";
import { stepCommand, type StepCommand, type StepKind } from "../../schemas/jobs";
import type { ActiveJob, JobState } from "../../domain/jobs/decider";
import type { JobStore } from "../../domain/jobs/store";
import { createStepLeases, StepBusy } from "./step-lease";
import { jobStepDuration, jobSteps } from "../../shared/metrics";

/**
 * The shared shell of every step consumer (fetcher, slicer, transcriber, aggregator,
 * reviewer, webhooks): a durable pull consumer on `job.cmd.<kind>.>`, so each step
 * scales by running more replicas on the same durable.
 *
 * For each command it checks "still wanted?" against the aggregate (job exists and has
 * not failed, the step is not done, the command is the step's current dispatch), runs
 * the step, and maps a failure to the aggregate: a retryable failure is recorded as
 * StepAttemptFailed and redelivered with backoff until `maxAttempts`; a permanent one
 * (or the last attempt) is recorded as final, which fails the job (the webhook's
 * excepted). Delivery is at-least-once, so steps are idempotent: each writes its
 * artifact before its event and checks for it first. A retryable error that carries
 * `Retry-After` (a transient routing failure: no worker reachable right now) is retried
 * no sooner than that.
 *
 * `admit` (the fetcher's owner share, fetch-slots.ts) may turn a command away before it
 * runs: it goes back to the stream with a growing delay and spends no attempt.
 *
 * `abortWhenJobEnds` (the fetcher): while a step runs, the replica listens on the job's
 * event subject, and a JobTerminated (DELETE) or JobFailed aborts the step's signal, so a
 * download in flight is closed at once instead of running to its deadline. The listener
 * is a core NATS subscription, at most once: a cancel published while this replica is
 * disconnected is missed, and the step then runs to its end and records nothing (the
 * aggregate ignores steps of a terminated job).
 */
export interface StepConsumerOptions {
  nats: Nats;
  store: JobStore;
  logger: Logger;
  kind: StepKind;
  /** Commands handled at once by this replica. */
  concurrency: number;
  maxAttempts: number;
  ackWaitMs: number;
  backoffMs: (delivery: number) => number;
  now: () => Date;
  /** May the step run here now? A release function, or undefined for "not now" (no attempt spent). */
  admit?: (job: ActiveJob) => (() => void) | undefined;
  /** Abort the step's signal when its job is terminated or fails meanwhile. */
  abortWhenJobEnds?: boolean;
  /** Runs the step; throws AppError on failure. */
  run(job: ActiveJob, command: StepCommand, signal: AbortSignal): Promise<void>;
}

export interface RunningStepConsumer {
  stop(): Promise<void>;
}

const durableFor = (kind: StepKind) => `jobs-${kind}`;

export async function startStepConsumer(options: StepConsumerOptions): Promise<RunningStepConsumer> {
  const { nats, store, logger, kind } = options;
  const stream = nats.topology.streams.jobs.name;
  const durable = durableFor(kind);
  await ensureConsumer(nats.jsm, {
    stream,
    durable,
    filterSubject: nats.topology.subjects.jobCommands(kind),
    ackWaitMs: options.ackWaitMs,
    // The handler decides when to give up (maxAttempts, from recorded failures); the
    // extra deliveries cover busy looks and replicas that crash mid-command without
    // getting to record anything. A command that still runs out is picked up again by
    // the process manager's stalled-step sweep.
    maxDeliver: options.maxAttempts + 50,
    maxAckPending: 1000,
    deliver: "all",
  });
  const aborter = new AbortController();
  const leases = createStepLeases(() => nats.kv("leases"), { ttlMs: 2 * options.ackWaitMs });

  /**
   * The command's step, when it is still wanted: job alive, step current and not done.
   * `behind`: the job as read does not know the step or this attempt yet. The command
   * is only published after its StepStarted is stored, so the read was stale (a direct
   * get answered by a replica that lags, as after a cluster node's loss): such a look
   * is made again at once through the stream leader, and later again if even that
   * lags, rather than drop the command.
   */
  const wanted = async (command: StepCommand): Promise<{ job?: ActiveJob; unknown?: boolean; behind?: boolean }> => {
    const direct = look(command, (await store.load(command.workflowId)).state);
    // a read behind the command: the leader's log has its StepStarted
    return direct.behind || direct.unknown ? look(command, (await store.load(command.workflowId, { fromLeader: true })).state) : direct;
  };
  const look = (command: StepCommand, state: JobState): { job?: ActiveJob; unknown?: boolean; behind?: boolean } => {
    if (state.status === "none") return { unknown: true };
    const step = state.steps[command.step];
    if (state.status === "errored" && kind !== "webhook") return {};
    if (state.status === "terminated") return {};
    if (!step || step.attempt < command.attempt) return { behind: true };
    if (step.attempt !== command.attempt || step.status === "complete" || step.status === "errored") return {};
    return { job: state };
  };

  const handle = async (msg: JsMsg): Promise<Outcome> => {
    const parsed = stepCommand.safeParse(safeJson(msg));
    if (!parsed.success) return terminate("malformed step command");
    const command = parsed.data;
    const first = await wanted(command);
    // A job nobody knows after a few looks is gone; the first looks may be stale reads.
    if (first.unknown) return msg.info.deliveryCount < STALE_READ_LOOKS ? retry(1000, "unknown job") : terminate("unknown job");
    if (first.behind) return msg.info.deliveryCount < STALE_READ_LOOKS ? retry(1000, "job state behind its command") : ack();
    if (!first.job) return ack();
    const delivery = msg.info.deliveryCount;
    const log = logger.child({ workflowId: command.workflowId, step: command.step, attempt: command.attempt, delivery, seq: msg.seq });
    const admitted = options.admit ? options.admit(first.job) : () => undefined;
    if (!admitted) {
      log.debug("owner holds its share of this replica's slots");
      return retry(Math.min(1000 * 2 ** Math.min(delivery - 1, 5), 30_000), "owner_share_taken");
    }
    try {
      return await runAdmitted(command, log, delivery);
    } finally {
      admitted();
    }
  };

  const runAdmitted = async (command: StepCommand, log: Logger, delivery: number): Promise<Outcome> => {
    let lease;
    try {
      lease = await leases.acquire(command.workflowId, command.step);
    } catch (err) {
      // Running elsewhere right now: look again around when that lease would expire
      // (the holder releases it earlier when it finishes). Spends no attempt.
      const waitMs = err instanceof StepBusy ? err.retryInMs : 1000;
      log.debug("step busy elsewhere", { waitMs });
      return retry(Math.min(Math.max(1000, waitMs / 4), 30_000), toAppError(err).code);
    }
    // Listening before the second look leaves no gap for a cancel to slip through.
    const jobEnd = options.abortWhenJobEnds ? watchJobEnd(nats, command.workflowId, aborter.signal) : undefined;
    // Another replica may have finished it between the first look and the lease.
    const again = await wanted(command).catch(async (err) => {
      jobEnd?.stop();
      await lease.release();
      throw err;
    });
    if (!again.job) {
      jobEnd?.stop();
      await lease.release();
      return again.behind || again.unknown ? retry(1000, "job state behind its command") : ack();
    }
    const state = again.job;
    try {
      log.debug("step running");
      await options.run(state, command, jobEnd?.signal ?? aborter.signal);
      log.debug("step done");
      return ack();
    } catch (err) {
      if (aborter.signal.aborted) return retry(0, "shutting down");
      // The job was cancelled or failed elsewhere: nothing to record, nothing to retry.
      if (jobEnd?.ended()) {
        log.info("step aborted: the job ended meanwhile", { event: jobEnd.ended() });
        return ack();
      }
      const e = toAppError(err);
      // Attempts are counted from the step's recorded failures, not from deliveries
      // (a delivery that only found the step busy is no attempt).
      const final = !e.retryable || (state.steps[command.step]?.failures ?? 0) + 1 >= options.maxAttempts;
      log.warn(final ? "step failed" : "step attempt failed, will retry", { code: e.code, error: e.message });
      await store.execute(command.workflowId, {
        type: "RecordStepAttemptFailed",
        step: command.step,
        attempt: command.attempt,
        delivery,
        error: { code: e.code, message: e.message },
        final,
        now: options.now().toISOString(),
      });
      return final ? ack() : retry(Math.max(options.backoffMs(delivery), retryAfterMs(e)), e.code);
    } finally {
      jobEnd?.stop();
      await lease.release();
    }
  };

  // each attempt's duration and outcome by step kind (shared/metrics.ts)
  const measured = async (msg: JsMsg): Promise<Outcome> => {
    const started = performance.now();
    let outcome = "error";
    try {
      const o = await handle(msg);
      outcome = o.kind;
      return o;
    } finally {
      jobSteps.inc({ step: kind, outcome });
      jobStepDuration.observe({ step: kind }, (performance.now() - started) / 1000);
    }
  };
  const running = await runConsumer(
    nats.js,
    { stream, durable, concurrency: options.concurrency, logger, workingEveryMs: Math.max(1000, Math.floor(options.ackWaitMs / 3)) },
    measured,
  );
  return {
    stop: async () => {
      // In-flight steps are abandoned (naked for immediate redelivery elsewhere);
      // whatever they already checkpointed is reused by the next attempt.
      aborter.abort(new Error("consumer stopping"));
      await running.stop();
    },
  };
}

/**
 * A signal that aborts when `parent` does or when the job's event subject carries a
 * JobTerminated or JobFailed (read from the Event-Type header, so nothing is parsed).
 */
function watchJobEnd(nats: Nats, workflowId: string, parent: AbortSignal): { signal: AbortSignal; ended(): string | undefined; stop(): void } {
  const controller = new AbortController();
  let ended: string | undefined;
  const onParent = () => controller.abort(parent.reason);
  if (parent.aborted) onParent();
  else parent.addEventListener("abort", onParent, { once: true });
  const sub = nats.nc.subscribe(nats.topology.subjects.jobEvent(workflowId), {
    callback: (err, msg) => {
      const type = err ? undefined : msg.headers?.get("Event-Type");
      if (type !== "JobTerminated" && type !== "JobFailed") return;
      ended = type;
      controller.abort(new AppError("conflict", "job_ended", `the job ended (${type}) while the step ran`, { retryable: false }));
    },
  });
  return {
    signal: controller.signal,
    ended: () => ended,
    stop: () => {
      parent.removeEventListener("abort", onParent);
      sub.unsubscribe();
    },
  };
}

function safeJson(msg: JsMsg): unknown {
  try {
    return msg.json();
  } catch {
    return undefined;
  }
}

/** The least delay a retryable error asks for with its Retry-After header (seconds), else 0. */
function retryAfterMs(e: AppError): number {
  const seconds = Number(e.headers["Retry-After"]);
  return Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 0;
}

/** Exponential backoff with a cap: base, 2·base, 4·base, … */
export const exponentialBackoff = (baseMs: number, capMs = 60_000) => (delivery: number) =>
  Math.min(capMs, baseMs * 2 ** Math.max(0, delivery - 1));

/** Deliveries that may find the job's state stale before a command is judged unwanted. */
const STALE_READ_LOOKS = 10;
