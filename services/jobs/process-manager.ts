import type { JsMsg } from "@nats-io/jetstream";
import type { UsageStore } from "../../domain/usage/store";
import { ack, runConsumer, terminate, type Outcome } from "../../shared/consumer";
import { AppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import { ensureConsumer, type Nats } from "../../shared/nats";
import type { Db } from "../../shared/db/index";
import { traceHeaders } from "../../shared/telemetry";
import type { StepCommand } from "../../schemas/jobs";
import { jobEventEnvelope } from "../../domain/jobs/events";
import { findQuietJobs } from "../../domain/jobs/queries";
import { createSweepBackoff } from "./sweep-backoff";
import { stepKind } from "../../domain/jobs/decider";
import type { JobStore } from "../../domain/jobs/store";

/**
 * The job process manager: reacts to every job event and issues what comes next.
 *
 * - On any event it runs `Advance` on the aggregate, which appends StepStarted for
 *   whatever may start now (at most `concurrency` chunk steps in flight) or
 *   JobCompleted. The append expects the subject's last sequence, so two replicas
 *   cannot both start the same step; the loser re-decides on fresh state.
 * - On StepStarted it publishes the step's command to `job.cmd.<kind>.<workflowId>`
 *   with a deterministic Nats-Msg-Id (`<workflowId>:<step>:<attempt>`), so a
 *   redelivered event does not issue the command twice (within the stream's
 *   duplicate window; step consumers also ignore stale or finished commands).
 * - On JobCompleted it records the job's audio seconds as usage, once per job
 *   (`<workflowId>:usage` dedup id).
 *
 * Publishing commands in reaction to the StepStarted event (rather than right after
 * appending it) means a crash between the two loses nothing: the event is redelivered
 * until the command is out.
 *
 * A sweep (every stallAfter/4) looks in the read model for running jobs with no event
 * for `stallAfterMs` and runs Advance with `stalledBefore`: a step whose command got
 * lost (dropped after max_deliver, a consumer deleted under it) is started again. A
 * step that was merely slow is unharmed: its lease makes the new command wait and its
 * checkpoint ends it.
 *
 * A second, quicker sweep (every idleAfter/3) takes running jobs with no step in flight
 * and no event for `idleAfterMs`: their next decision was lost (seen once after a
 * stream leader's SIGKILL, cause not found: docs/design/jobs.md "How a job runs"). Each is read
 * afresh from the stream leader, its cached state dropped, and advanced. A job that is
 * only waiting for its steps is never touched by it; one it advanced to no effect waits
 * twice as long before the next look each time (sweep-backoff.ts).
 */
export interface ProcessManagerOptions {
  nats: Nats;
  store: JobStore;
  logger: Logger;
  now: () => Date;
  /** True when a review model is configured; review jobs fail fast otherwise. */
  reviewAvailable: boolean;
  concurrency?: number;
  /** The jobs read model, for the stalled-step sweep (omit to disable it). */
  db?: Db;
  /** A step in flight with no news for this long is started again (default 10 min). */
  stallAfterMs?: number;
  /** A running job with no step in flight and no news for this long is advanced again (default 30 s). */
  idleAfterMs?: number;
  /** Records a completed job's usage and draws its audio from the live budget of its window. */
  usage: Pick<UsageStore, "record" | "consumeBudget">;
}

const PROCESS_MANAGER_DURABLE = "jobs-process-manager";

export async function startProcessManager(options: ProcessManagerOptions) {
  const { nats, store, logger } = options;
  const stream = nats.topology.streams.jobs.name;
  await ensureConsumer(nats.jsm, {
    stream,
    durable: PROCESS_MANAGER_DURABLE,
    filterSubject: nats.topology.subjects.jobEvents,
    ackWaitMs: 30_000,
    maxDeliver: 50,
    maxAckPending: 5000,
    deliver: "all",
  });

  const handle = async (msg: JsMsg): Promise<Outcome> => {
    let envelope;
    try {
      envelope = jobEventEnvelope.parse(msg.json());
    } catch {
      return terminate("malformed job event");
    }
    const workflowId = msg.subject.slice(msg.subject.lastIndexOf(".") + 1);
    if (envelope.type === "StepStarted") {
      const { step, attempt } = envelope.data;
      const command: StepCommand = { workflowId, step, attempt };
      const h = traceHeaders();
      h.set("Job-Step", step);
      try {
        await nats.js.publish(nats.topology.subjects.jobCommand(stepKind(step), workflowId), JSON.stringify(command), {
          msgID: `${workflowId}:${step}:${attempt}`,
          headers: h,
        });
      } catch (err) {
        throw new AppError("unavailable", "event_store_unavailable", `could not issue ${step}`, { cause: err });
      }
    }
    if (envelope.type === "JobCompleted") {
      const { state } = await store.load(workflowId, { atLeastSeq: msg.info.streamSequence });
      if (state.status !== "none") {
        await options.usage.record({
          keyId: state.spec.keyId,
          ownerId: state.spec.ownerId,
          plane: "batch",
          audioSeconds: envelope.data.audioSeconds,
          requests: 1,
          subjectId: workflowId,
          at: new Date(envelope.data.at),
        });
        // The live budget (domain/usage/budget.ts) learns of it too. At least once: a
        // redelivered JobCompleted may draw it twice, which errs on the strict side.
        await options.usage.consumeBudget(state.spec.keyId, envelope.data.audioSeconds, new Date(envelope.data.at));
      }
    }
    // decided on a state that includes this event (a replica's direct get may lag it)
    await store.execute(workflowId, { type: "Advance", now: options.now().toISOString(), reviewAvailable: options.reviewAvailable }, { atLeastSeq: msg.info.streamSequence });
    return ack();
  };

  const running = await runConsumer(
    nats.js,
    { stream, durable: PROCESS_MANAGER_DURABLE, concurrency: options.concurrency ?? 16, logger, backoffMs: (n) => Math.min(5000, 50 * 2 ** n) },
    handle,
  );

  const stallAfterMs = options.stallAfterMs ?? 10 * 60_000;
  const idleAfterMs = options.idleAfterMs ?? 30_000;
  const idleBackoff = createSweepBackoff(idleAfterMs, 10 * 60_000);
  const advanceQuiet = async (quietMs: number, stalled: boolean, what: string) => {
    if (!options.db) return;
    const now = options.now();
    const before = new Date(now.getTime() - quietMs);
    const found = await findQuietJobs(options.db, before, 200, { idle: !stalled });
    if (!stalled) idleBackoff.keepOnly(found);
    for (const workflowId of found) {
      if (!stalled && !idleBackoff.due(workflowId, now.getTime())) continue;
      const command = { type: "Advance" as const, now: now.toISOString(), reviewAvailable: options.reviewAvailable, ...(stalled ? { stalledBefore: before.toISOString() } : {}) };
      const { events } = await store.execute(workflowId, command, { fresh: true });
      if (!stalled) idleBackoff.looked(workflowId, events.length > 0, now.getTime());
      const started = events.filter((e) => e.type === "StepStarted").map((e) => (e.type === "StepStarted" ? e.data.step : ""));
      if (events.length) logger.warn(what, { workflowId, steps: started, events: events.map((e) => e.type) });
    }
  };
  const every = (ms: number, run: () => Promise<void>) => {
    const timer = setInterval(() => {
      run().catch((err) => logger.warn("job sweep failed", { error: String(err) }));
    }, ms);
    timer.unref();
    return timer;
  };
  const timers = [
    every(Math.max(1000, Math.floor(stallAfterMs / 4)), () => advanceQuiet(stallAfterMs, true, "restarted stalled steps")),
    every(Math.max(1000, Math.floor(idleAfterMs / 3)), () => advanceQuiet(idleAfterMs, false, "advanced a job whose next decision was lost")),
  ];
  return {
    stop: async () => {
      for (const timer of timers) clearInterval(timer);
      await running.stop();
    },
  };
}
