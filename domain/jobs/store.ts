import { appendEvents } from "../../shared/event-store";
import { AppError, isAppError } from "../../shared/errors";
import type { Nats } from "../../shared/nats";
import { jobEventEnvelope, type JobEvent } from "./events";
import { decide, evolve, initialJobState, type JobCommand, type JobState } from "./decider";

/**
 * Loads job aggregates from JetStream and runs commands against them with optimistic
 * concurrency.
 *
 * Loading reads the job's subject with direct gets (`next_by_subj`), continuing from a
 * small in-process cache of folded states, so the process manager (which looks at a
 * job after every one of its events) pays for new events only, not for the whole
 * history each time. The cache is only an accelerator: every load still reads
 * forward to the end of the subject, so it is never stale.
 */
export interface JobStore {
  load(workflowId: string): Promise<{ state: JobState; lastSeq: number }>;
  /**
   * Decides `command` on the current state and appends the events, expecting the
   * subject not to have moved; on a concurrent append it reloads and decides again.
   */
  execute(workflowId: string, command: JobCommand | ((state: JobState) => JobCommand)): Promise<{ events: JobEvent[]; state: JobState }>;
}

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

  const load = async (workflowId: string): Promise<Cached> => {
    const subject = nats.topology.subjects.jobEvent(workflowId);
    let { state, lastSeq } = cache.get(workflowId) ?? { state: initialJobState, lastSeq: 0 };
    try {
      while (true) {
        const m = await nats.jsm.direct.getMessage(stream, { seq: lastSeq + 1, next_by_subj: subject });
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
    async execute(workflowId, command) {
      const subject = nats.topology.subjects.jobEvent(workflowId);
      for (let attempt = 1; ; attempt++) {
        const { state, lastSeq } = await load(workflowId);
        const cmd = typeof command === "function" ? command(state) : command;
        const events = decide(cmd, state);
        if (events.length === 0) return { events, state };
        try {
          const { seqs } = await appendEvents(
            nats.js,
            jobEventEnvelope,
            subject,
            events.map((e) => ({ type: e.type, data: e.data, metadata: { correlationId: workflowId } })),
            { expected: lastSeq === 0 ? "none" : lastSeq },
          );
          const next = events.reduce(evolve, state);
          remember(workflowId, { state: next, lastSeq: seqs.at(-1) ?? lastSeq });
          return { events, state: next };
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
