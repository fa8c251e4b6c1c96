import type { UsagePlane } from "../schemas/usage";
import { usageEventEnvelope, type UsageEvent } from "../schemas/usage";
import type { Db } from "./db/index";
import { withStore } from "./db/index";
import { appendEvents } from "./event-store";
import type { Nats } from "./nats";
import type { Limits } from "./plans";

/**
 * Usage accounting shared by every plane. Billing windows are fixed, UTC-aligned
 * intervals of `USAGE_WINDOW_SECONDS` (default 86 400: one UTC day); a window's audio
 * seconds are compared with the plan's `maxAudioSecondsPerWindow`.
 */
export function windowStart(at: Date, windowSeconds: number): Date {
  const ms = windowSeconds * 1000;
  return new Date(Math.floor(at.getTime() / ms) * ms);
}

export interface UsageRecord {
  keyId: string;
  ownerId: string;
  plane: UsagePlane;
  audioSeconds: number;
  requests: number;
  /** Session id, segment request id or job id. */
  subjectId: string;
  /** Deterministic dedup id, e.g. `${jobId}:usage`; a retry with the same id counts once. */
  usageId: string;
  at: Date;
}

/** Appends a UsageRecorded event. Idempotent on `usageId` within the dedup window. */
export async function recordUsage(nats: Nats, record: UsageRecord): Promise<void> {
  await appendEvents<UsageEvent>(nats.js, usageEventEnvelope, nats.topology.subjects.usageEvent(record.keyId), [
    {
      type: "UsageRecorded",
      msgId: record.usageId,
      data: {
        keyId: record.keyId,
        ownerId: record.ownerId,
        plane: record.plane,
        audioSeconds: Math.round(record.audioSeconds * 1000) / 1000,
        requests: record.requests,
        subjectId: record.subjectId,
        occurredAt: record.at.toISOString(),
      },
      metadata: { correlationId: record.subjectId },
    },
  ]);
}

const usedReads = new WeakMap<Db, Map<string, Promise<number>>>();

/**
 * Audio seconds used in the current window (from the read model; eventually consistent).
 * Concurrent reads of one key and window share one query: 200 upgrades of a key at once
 * used to queue 200 queries on the pool, and those past its connection timeout failed 503.
 */
export function usedAudioSeconds(db: Db, keyId: string, now: Date, windowSeconds: number): Promise<number> {
  let reads = usedReads.get(db);
  if (!reads) usedReads.set(db, (reads = new Map()));
  const k = `${keyId}:${windowStart(now, windowSeconds).getTime()}`;
  const pending = reads.get(k);
  if (pending) return pending;
  const read = readUsedAudioSeconds(db, keyId, now, windowSeconds).finally(() => reads.delete(k));
  reads.set(k, read);
  return read;
}

async function readUsedAudioSeconds(db: Db, keyId: string, now: Date, windowSeconds: number): Promise<number> {
  return withStore("auth_unavailable", async () => {
    const row = await db
      .selectFrom("usage_windows")
      .select("audio_seconds")
      .where("key_id", "=", keyId)
      .where("window_start", "=", windowStart(now, windowSeconds))
      .executeTakeFirst();
    return row ? Number(row.audio_seconds) : 0;
  });
}

/** Whole seconds left in the current billing window (never negative). */
export async function remainingAudioSeconds(
  db: Db,
  principal: { keyId: string; limits: Limits },
  now: Date,
  windowSeconds: number,
): Promise<number> {
  const used = await usedAudioSeconds(db, principal.keyId, now, windowSeconds);
  return Math.max(0, Math.floor(principal.limits.maxAudioSecondsPerWindow - used));
}
