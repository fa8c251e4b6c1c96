import { appendEvents } from "../../shared/event-store";
import { AppError, isAppError } from "../../shared/errors";
import type { Nats } from "../../shared/nats";
import { decide, evolve, initialJobState, reviewChunkStep, transcribeStep, type JobCommand, type JobState } from "./decider";
import { jobEventEnvelope, type JobEvent } from "./events";

/**
 * Loads job aggregates from JetStream and runs commands against them with optimistic
 * concurrency. It is the only writer of `job.evt`: every fact about a job, the webhook's
 * outcomes included, is decided on the job's state and appended here.
 *
 * Loading reads the job's subject with direct gets (`next_by_subj`), continuing from a
 * small in-process cache of folded states, so the process manager (which looks at a
 * job after every one of its events) pays for new events only, not for the whole
 * history each time. The cache is only an accelerator: it holds states as read, never
 * as this process appended to them, and every load still reads forward to the end of
 * the subject, so it is never stale.
 */
export interface JobStore {
  load(workflowId: string, options?: ReadAtLeast): Promise<{ state: JobState; lastSeq: number }>;
  /**
   * Decides `command` on the current state and appends the events, expecting the
   * subject not to have moved; on a concurrent append it reloads and decides again.
   */
  execute(workflowId: string, command: JobCommand | ((state: JobState) => JobCommand), options?: ReadAtLeast): Promise<{ events: JobEvent[]; state: JobState }>;
}

interface ReadAtLeast {
  /**
   * The stream sequence of an event of this job the caller has seen (the event a
   * consumer is reacting to): the state must include it. Direct gets may be answered by
   * a replica that has not applied it yet (a clustered stream, a node just killed); such
   * a read is retried briefly, then refused as retryable, never decided on.
   */
  atLeastSeq?: number;
  /**
   * Read through the stream leader's message API, which always has every stored event,
   * instead of direct gets (answered by any replica). For a caller that has reason to
   * believe a direct read is stale (a step command for a step the read did not show).
   */
  fromLeader?: boolean;
  /**
   * Forget what this process has folded of the job and read it whole from the leader:
   * for a sweep that finds a job stuck, in case what was cached (an append the stream
   * acknowledged) did not survive the loss of a node.
   */
  fresh?: boolean;
}

/** How often, and how long apart, a read behind `atLeastSeq` or a duplicate is retried before the caller is told to retry later. */
const BEHIND_RETRIES = 8;
const behindDelayMs = (attempt: number) => Math.min(500, 25 * 2 ** attempt) * (0.5 + Math.random() / 2);

interface Cached {
  state: JobState;
  lastSeq: number;
}

export function createJobStore(nats: Nats, options: { cacheSize?: number; maxConflicts?: number } = {}): JobStore {
  const stream = nats.topology.streams.jobs.name;
  const cache = new Map<string, Cached>();
  const cacheSize = options.cacheSize ?? 2000;
  const maxConflicts = options.maxConflicts ?? 20;

  const remember = (id: string, value: Cached) => {
    cache.delete(id);
    cache.set(id, value);
    if (cache.size > cacheSize) cache.delete(cache.keys().next().value!);
  };

  const load = async (workflowId: string, options: ReadAtLeast = {}): Promise<Cached> => {
    for (let attempt = 1; ; attempt++) {
      // A direct get first (cheap, any replica); a read found behind goes to the leader,
      // whose log has every acknowledged event: a replica can stay behind for minutes
      // after a node's loss (nats-server 2.9), and retrying it alone never caught up.
      if (options.fresh && attempt === 1) cache.delete(workflowId);
      const value = await readForward(workflowId, options.fromLeader === true || options.fresh === true || attempt > 1);
      if (value.lastSeq >= (options.atLeastSeq ?? 0)) return value;
      if (attempt >= BEHIND_RETRIES) {
        throw new AppError("unavailable", "event_store_behind", `job ${workflowId} read up to ${value.lastSeq}, before the event at ${options.atLeastSeq} it was asked about`);
      }
      await new Promise((r) => setTimeout(r, behindDelayMs(attempt)));
    }
  };

  const readForward = async (workflowId: string, fromLeader: boolean): Promise<Cached> => {
    const subject = nats.topology.subjects.jobEvent(workflowId);
    let { state, lastSeq } = cache.get(workflowId) ?? { state: initialJobState, lastSeq: 0 };
    // STREAM.MSG.GET takes `next_by_subj` as direct gets do (nats-server 2.9+); nats.js
    // types it for direct gets only
    const next = { seq: lastSeq + 1, next_by_subj: subject };
    try {
      while (true) {
        next.seq = lastSeq + 1;
        const m = fromLeader ? await nats.jsm.streams.getMessage(stream, next as unknown as { seq: number }) : await nats.jsm.direct.getMessage(stream, next);
        if (!m) break;
        const envelope = jobEventEnvelope.parse(m.json());
        state = evolve(state, envelope);
        lastSeq = m.seq;
      }
    } catch (err) {
      if (isAppError(err)) throw err;
      throw new AppError("unavailable", "event_store_unavailable", `could not read job ${workflowId}`, { cause: err });
    }
    const value = { state, lastSeq };
    remember(workflowId, value);
    return value;
  };

  return {
    load,
    async execute(workflowId, command, options = {}) {
      const subject = nats.topology.subjects.jobEvent(workflowId);
      for (let attempt = 1; ; attempt++) {
        // after a conflict or a duplicate the read was behind: read the leader's log
        const { state, lastSeq } = await load(workflowId, attempt > 1 ? { ...options, fromLeader: true } : options);
        const cmd = typeof command === "function" ? command(state) : command;
        const events = decide(cmd, state);
        if (events.length === 0) return { events, state };
        try {
          const { duplicates } = await appendEvents(nats.js, jobEventEnvelope, subject, withEventIds(workflowId, state, events), {
            expected: lastSeq === 0 ? "none" : lastSeq,
          });
          if (duplicates > 0) {
            // A fact with this id is in the log already, so the state decided on was
            // behind it (JetStream answers a duplicate id before it checks the expected
            // sequence): read on from the cached state (the fact lies after it) and
            // decide afresh, as for a conflict, a little later: a read served by a replica
            // behind the leader would otherwise decide the same fact again at once. Never
            // given up on silently: the caller is told to retry.
            if (attempt < BEHIND_RETRIES) {
              await new Promise((r) => setTimeout(r, behindDelayMs(attempt)));
              continue;
            }
            throw new AppError("unavailable", "event_store_behind", `job ${workflowId}: ${events[0]!.type} is in the log already but not in the state read`);
          }
          // Not cached as folded: the cache keeps the state as read, and the next load
          // reads this append back with whatever else landed meanwhile. On a clustered
          // stream the expected sequence is only checked before the write is proposed
          // (nats-server#4320, and across a leader change still: #8469), so a concurrent
          // append can land before this one; a cache that assumed nothing did kept a
          // finished slice running in the process manager's eyes for good.
          return { events, state: events.reduce(evolve, state) };
        } catch (err) {
          if (isAppError(err) && err.code === "concurrent_modification" && attempt < maxConflicts) {
            // Another writer got there first: back off a little (with jitter) and decide again.
            await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 * attempt)));
            continue;
          }
          throw err;
        }
      }
    },
  };
}

/**
 * The event ids (`Nats-Msg-Id`, and the envelope's `eventId`) of events decided on
 * `state`, the one rule for `job.evt`. An id names the fact on the job's timeline, so
 * the same fact decided twice (a redelivered command, two replicas racing) carries the
 * same id and the stream keeps it once within its duplicate window (10 min); the
 * expected sequence guards every append beyond that.
 *
 * - `<id>:submitted`, `<id>:resumed:<attempt>`, `<id>:completed`, `<id>:terminated`,
 *   `<id>:failed:<resumes>` (a resumed job may fail again)
 * - `<id>:<step>:<attempt>:started`; a step's result `<id>:<step>:<attempt>:done`
 *   (AudioFetched, AudioSliced, ChunkTranscribed, TranscriptAggregated, ChunkReviewed,
 *   TranscriptReviewed), the attempt being the one it completes
 * - `<id>:<step>:<attempt>:<delivery>` for a failed attempt, `<id>:webhook:delivered`
 *   (the ids the webhook service gave these before it went through the store)
 *
 * Never `<id>:<step>:<attempt>`: that is the step command's id (process-manager.ts) in
 * the same stream, and JetStream deduplicates per stream.
 */
export function jobEventId(workflowId: string, state: JobState, event: JobEvent): string {
  const job = state.status === "none" ? undefined : state;
  const done = (step: string) => `${workflowId}:${step}:${job?.steps[step]?.attempt ?? job?.attempts[step] ?? 1}:done`;
  switch (event.type) {
    case "JobSubmitted":
      return `${workflowId}:submitted`;
    case "JobResumed":
      return `${workflowId}:resumed:${event.data.attempt}`;
    case "StepStarted":
      return `${workflowId}:${event.data.step}:${event.data.attempt}:started`;
    case "StepAttemptFailed":
      return `${workflowId}:${event.data.step}:${event.data.attempt}:${event.data.delivery}`;
    case "AudioFetched":
      return done("fetch");
    case "AudioSliced":
      return done("slice");
    case "ChunkTranscribed":
      return done(transcribeStep(event.data.index));
    case "TranscriptAggregated":
      return done("aggregate");
    case "ChunkReviewed":
      return done(reviewChunkStep(event.data.index));
    case "TranscriptReviewed":
      return done("review");
    case "WebhookDelivered":
      return `${workflowId}:webhook:delivered`;
    case "JobCompleted":
      return `${workflowId}:completed`;
    case "JobFailed":
      return `${workflowId}:failed:${job?.resumes ?? 0}`;
    case "JobTerminated":
      return `${workflowId}:terminated`;
    default: {
      const never: never = event;
      throw new Error(`unknown event ${JSON.stringify(never)}`);
    }
  }
}

/** The events to append, each with its id, named on the state as it is when that event comes. */
function withEventIds(workflowId: string, state: JobState, events: JobEvent[]) {
  let current = state;
  return events.map((e) => {
    const msgId = jobEventId(workflowId, current, e);
    current = evolve(current, e);
    return { type: e.type, data: e.data, msgId, metadata: { correlationId: workflowId } };
  });
}
