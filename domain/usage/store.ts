import type { Limits } from "../../schemas/plans";
import type { Db } from "../../shared/db/index";
import { appendEvents } from "../../shared/event-store";
import type { Nats } from "../../shared/nats";
import { audioBudget, consumeAudioBudget, createSegmentBudgets, type AudioBudget, type SegmentBudgets } from "./budget";
import { decideUsage } from "./decider";
import { usageEventEnvelope, type UsageCommand, type UsageEvent } from "./events";

/** What a subject consumed; `at` is when. */
type UsageRecord = Omit<UsageCommand["data"], "at"> & { at: Date };

/**
 * Usage of every plane: the only write path to the usage stream (`usage.evt.<keyId>`),
 * and the live audio budget of each key's billing window (budget.ts, KV).
 */
export interface UsageStore {
  /**
   * Appends the UsageRecorded the decider makes of `record`, under its usage id:
   * idempotent within the stream's 10 min duplicate window.
   */
  record(record: UsageRecord): Promise<void>;
  /** The live budget of a key's current window, for one request or session. */
  budget(principal: { keyId: string; limits: Limits }, now: Date): AudioBudget;
  /** Draws audio already spent by a key (a completed batch job), whatever its plan. */
  consumeBudget(keyId: string, seconds: number, at: Date): Promise<void>;
  /** A new per-process allocator of the segment plane's budget blocks (stop it when done). */
  segmentBudgets(options?: { returnAfterMs?: number }): SegmentBudgets;
}

export function createUsageStore(deps: { nats: Nats; db: Db; windowSeconds: number }): UsageStore {
  const { nats } = deps;
  return {
    async record(record) {
      const { at, ...data } = record;
      const decided = decideUsage({ type: "RecordUsage", data: { ...data, at: at.toISOString() } });
      await appendEvents<UsageEvent>(
        nats.js,
        usageEventEnvelope,
        nats.topology.subjects.usageEvent(record.keyId),
        decided.map(({ event, eventId }) => ({ ...event, msgId: eventId, metadata: { correlationId: event.data.subjectId } })),
      );
    },
    budget: (principal, now) => audioBudget(deps, principal, now),
    consumeBudget: (keyId, seconds, at) => consumeAudioBudget(deps, keyId, seconds, at),
    segmentBudgets: (options) => createSegmentBudgets(deps, options),
  };
}
