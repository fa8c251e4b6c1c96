import type { ProjectionLagPolicy } from "../../shared/projection";

/**
 * The pure rules behind /readyz (readiness.ts gathers the facts, these judge them).
 *
 * A projection is judged by how long its oldest unapplied event has waited, not by
 * whether its offset equals the stream's last sequence at the instant of the probe:
 * under steady writes a healthy projection is one event behind most of the time, and
 * the equality made readiness flap 200↔503 every few hundred milliseconds.
 *
 * - `bounded` read models (what requests read: api_keys for authenticating a new key,
 *   usage_windows for /v1/usage) fail the check once their oldest unapplied event is
 *   older than `maxLagMs`: behind for a bounded time, however many events that is.
 * - `informational` read models (jobs: batch progress that only job polls read) never
 *   fail it: one tenant's large job can put the jobs read model thousands of events
 *   behind, and that must not take the realtime and segment planes out of rotation.
 *   The detail still says how far behind it is.
 */
export interface Check {
  ok: boolean;
  detail?: string;
}


export interface ProjectionLag {
  /** Last stream sequence the projection applied (its stored offset). */
  applied: number;
  /** Last sequence of the projection's subjects in the stream (0: none). */
  head: number;
  /** Stream time of the first event after `applied` on its subjects (absent when caught up or unknown). */
  oldestUnappliedAt?: number;
  now: number;
  maxLagMs: number;
  policy: ProjectionLagPolicy;
}

export function judgeProjectionLag(lag: ProjectionLag): Check {
  if (lag.applied >= lag.head) return { ok: true, detail: `caught up at seq ${lag.applied}` };
  const gap = lag.head - lag.applied;
  // Clocks of this host and the NATS server may differ a little: never a negative age.
  const waitedMs = lag.oldestUnappliedAt === undefined ? undefined : Math.max(0, lag.now - lag.oldestUnappliedAt);
  const behind = `behind: applied seq ${lag.applied} of ${lag.head} (at most ${gap} event${gap === 1 ? "" : "s"})`;
  const age = waitedMs === undefined ? "" : `, oldest unapplied event ${(waitedMs / 1000).toFixed(1)} s old`;
  switch (lag.policy) {
    case "informational":
      return { ok: true, detail: `${behind}${age}; informational, never fails readiness` };
    case "bounded": {
      // Unknown age (the event was just removed, or the lookup failed): one probe's grace.
      const ok = waitedMs === undefined || waitedMs <= lag.maxLagMs;
      return { ok, detail: `${behind}${age}; bound ${(lag.maxLagMs / 1000).toFixed(0)} s` };
    }
    default: {
      const never: never = lag.policy;
      throw new Error(`unknown projection lag policy ${String(never)}`);
    }
  }
}

export interface SegmentPlaneFacts {
  /** The NATS adapter's health: connected, everything re-declared since the last reconnect. */
  natsOk: boolean;
  /** Warm workers in the router's view that are neither stale nor left out as dead or unresponsive. */
  warmWorkers: string[];
  /** Workers left out of rotation until they announce themselves again. */
  leftOut: string[];
  hasFallback: boolean;
}

/**
 * The segment plane can serve when NATS is up with its resources declared (rate limits,
 * budgets, usage and audit events all go through it) and a clip has somewhere to go: a
 * warm worker whose heartbeat the router saw since the last reconnect (the registry's
 * view after a reconnect holds only entries re-announced since), or the fallback provider.
 */
export function judgeSegmentPlane(f: SegmentPlaneFacts): Check {
  const out = f.leftOut.length ? `; left out until they answer again: ${f.leftOut.join(", ")}` : "";
  if (!f.natsOk) return { ok: false, detail: "NATS is not ready (see the nats check)" };
  if (f.warmWorkers.length > 0) {
    return { ok: true, detail: `${f.warmWorkers.length} warm worker${f.warmWorkers.length === 1 ? "" : "s"} (${f.warmWorkers.join(", ")})${f.hasFallback ? " and the fallback" : ""}${out}` };
  }
  if (f.hasFallback) return { ok: true, detail: `no warm worker: the fallback provider serves${out}` };
  return { ok: false, detail: `no warm worker has announced itself since the last reconnect, and no fallback is configured${out}` };
}
