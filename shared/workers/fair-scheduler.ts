/**
 * Who goes next to the engines, among the work one process holds: the utterances of an
 * rt-transcriber replica (services/rt-transcriber), the pieces of long segment requests
 * in an HTTP gateway (shared/workers/pieces-run.ts). A "session" is the
 * group whose work in flight is bounded (a realtime session; a segment request, whose
 * bound is its cap on pieces in flight), an "utterance" one clip of it.
 *
 * - Round-robin across owners (tenants): each turn serves the next owner in the ring
 *   that has an utterance able to go, so an owner with hundreds of sessions gets one
 *   turn for every turn of an owner with two. Equal shares, not weighted by plan:
 *   plans already bound an owner's sessions and `maxConcurrentUtterances`; a weight
 *   would let a large plan starve a small one again under overload.
 * - Within an owner, oldest commit first.
 * - An utterance goes only while its session has fewer than `maxPerSession` in flight
 *   here (the KV slot table enforces it across replicas on top).
 * - Local engines first, up to `capacity()` in flight. When they are full and a fallback
 *   provider is configured the utterance goes there at once (`fallback`); otherwise it
 *   waits, at most until `committedAt + maxWaitMs`, then comes back `expired`.
 *
 * The clock and timers are passed in so tests drive them.
 */
export interface QueuedUtterance {
  owner: string;
  sessionId: string;
  itemId: string;
  maxPerSession: number;
  /** Epoch ms of the commit: the wait is counted from it. */
  committedAt: number;
}

/** `stopped`: the replica is stopping; the utterance is left to another one. */
export type Grant = "local" | "fallback" | "expired" | "stopped";

interface BacklogStats {
  queued: number;
  localInFlight: number;
  fallbackInFlight: number;
  capacity: number;
  /** Wait so far of the oldest queued utterance (0 when none). */
  oldestWaitMs: number;
  maxWaitMs: number;
  /** Utterances failed `engine_overloaded` so far. */
  expired: number;
  /** See `isSaturated`. */
  saturated: boolean;
}

export interface FairScheduler {
  /** Resolves when the utterance may go: to a local engine, to the fallback, or expired. */
  enqueue(u: QueuedUtterance): Promise<Grant>;
  /** The utterance's work is over: frees its engine (if local) and its session's turn. */
  release(u: QueuedUtterance, grant: Grant): void;
  /** Re-examines the queue (capacity may have grown). */
  pump(): void;
  stats(): BacklogStats;
  /** Hands everything still queued back as `stopped`. */
  close(): void;
}

export interface SchedulerOptions {
  capacity: () => number;
  fallback: () => boolean;
  maxWaitMs: number;
  now?: () => number;
  setTimer?: (fn: () => void, ms: number) => { cancel(): void };
}

/** How recently an expiry keeps the backlog reported saturated. */
const SATURATED_AFTER_EXPIRY_MS = 2000;

/**
 * Saturated: an utterance has already waited half the maximum, or one expired within
 * the last 2 s. New sessions would only add speech that waits out the limit.
 */
function isSaturated(oldestWaitMs: number, maxWaitMs: number, msSinceExpiry: number): boolean {
  return oldestWaitMs >= maxWaitMs / 2 || msSinceExpiry < SATURATED_AFTER_EXPIRY_MS;
}

interface Entry {
  u: QueuedUtterance;
  resolve: (g: Grant) => void;
  timer: { cancel(): void };
}

const defaultTimer = (fn: () => void, ms: number) => {
  const t = setTimeout(fn, Math.max(0, ms));
  return { cancel: () => clearTimeout(t) };
};

export function createFairScheduler(options: SchedulerOptions): FairScheduler {
  const now = options.now ?? Date.now;
  const setTimer = options.setTimer ?? defaultTimer;
  /** Owner → its queued utterances, oldest commit first. */
  const queues = new Map<string, Entry[]>();
  /** Owners with queued utterances, in turn order; `cursor` is whose turn is next. */
  let ring: string[] = [];
  let cursor = 0;
  const perSession = new Map<string, number>();
  let localInFlight = 0;
  let fallbackInFlight = 0;
  let expired = 0;
  let lastExpiry = -Infinity;

  const sessionHasRoom = (u: QueuedUtterance) => (perSession.get(u.sessionId) ?? 0) < u.maxPerSession;

  /** The next utterance able to go, owners in turn from the cursor. */
  const findNext = (): { ringIndex: number; owner: string; index: number } | undefined => {
    for (let k = 0; k < ring.length; k++) {
      const ringIndex = (cursor + k) % ring.length;
      const owner = ring[ringIndex]!;
      const index = queues.get(owner)!.findIndex((e) => sessionHasRoom(e.u));
      if (index >= 0) return { ringIndex, owner, index };
    }
    return undefined;
  };

  const remove = (owner: string, index: number, ringIndex: number): Entry => {
    const q = queues.get(owner)!;
    const [entry] = q.splice(index, 1);
    if (q.length === 0) {
      queues.delete(owner);
      ring.splice(ringIndex, 1);
      if (ringIndex < cursor) cursor--;
    }
    if (ring.length === 0) cursor = 0;
    else cursor %= ring.length;
    entry!.timer.cancel();
    return entry!;
  };

  const pump = () => {
    while (true) {
      const next = findNext();
      if (!next) return;
      let grant: Grant;
      if (localInFlight < options.capacity()) grant = "local";
      else if (options.fallback()) grant = "fallback";
      else return;
      const owner = ring[next.ringIndex]!;
      const entry = remove(next.owner, next.index, next.ringIndex);
      // the owner just served goes to the back of the turn order
      const at = ring.indexOf(owner);
      if (at >= 0) cursor = (at + 1) % ring.length;
      if (grant === "local") localInFlight++;
      else fallbackInFlight++;
      perSession.set(entry.u.sessionId, (perSession.get(entry.u.sessionId) ?? 0) + 1);
      entry.resolve(grant);
    }
  };

  const expire = (entry: Entry) => {
    const q = queues.get(entry.u.owner);
    const index = q?.indexOf(entry) ?? -1;
    if (index < 0) return; // already granted
    remove(entry.u.owner, index, ring.indexOf(entry.u.owner));
    expired++;
    lastExpiry = now();
    entry.resolve("expired");
  };

  return {
    enqueue(u) {
      return new Promise<Grant>((resolve) => {
        const entry: Entry = { u, resolve, timer: { cancel: () => undefined } };
        let q = queues.get(u.owner);
        if (!q) {
          q = [];
          queues.set(u.owner, q);
          // a newcomer takes its turn right after the owner now being served
          ring.splice(cursor, 0, u.owner);
        }
        const at = q.findIndex((e) => e.u.committedAt > u.committedAt);
        if (at < 0) q.push(entry);
        else q.splice(at, 0, entry);
        entry.timer = setTimer(() => expire(entry), u.committedAt + options.maxWaitMs - now());
        pump();
      });
    },
    release(u, grant) {
      if (grant === "expired" || grant === "stopped") return;
      if (grant === "local") localInFlight--;
      else fallbackInFlight--;
      const n = (perSession.get(u.sessionId) ?? 1) - 1;
      if (n <= 0) perSession.delete(u.sessionId);
      else perSession.set(u.sessionId, n);
      pump();
    },
    pump,
    stats() {
      const t = now();
      let oldest = Infinity;
      let queued = 0;
      for (const q of queues.values()) {
        queued += q.length;
        for (const e of q) oldest = Math.min(oldest, e.u.committedAt);
      }
      const oldestWaitMs = queued ? Math.max(0, t - oldest) : 0;
      return {
        queued,
        localInFlight,
        fallbackInFlight,
        capacity: options.capacity(),
        oldestWaitMs,
        maxWaitMs: options.maxWaitMs,
        expired,
        saturated: isSaturated(oldestWaitMs, options.maxWaitMs, t - lastExpiry),
      };
    },
    close() {
      for (const q of [...queues.values()]) {
        for (const e of [...q]) {
          remove(e.u.owner, q.indexOf(e), ring.indexOf(e.u.owner));
          e.resolve("stopped");
        }
      }
    },
  };
}
