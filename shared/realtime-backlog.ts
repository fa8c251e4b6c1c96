import type { Subscription } from "@nats-io/transport-node";
import type { z } from "zod";
import { transcriberBacklog, vadLoad, type TranscriberBacklog, type VadLoad } from "../schemas/realtime";
import type { Nats } from "./nats";

/**
 * The realtime plane's load reports on core NATS: the rt-transcribers' backlog
 * (schemas/realtime.ts `transcriberBacklog`, `<prefix>.rt.backlog`) and the VADs' lag
 * and loop delay (`vadLoad`, `<prefix>.rt.load`). At most once a replica's interval,
 * lost when nobody listens, which is fine: a report older than `REPORT_FRESH_MS` no
 * longer counts, so a replica that died stops refusing upgrades within that time.
 */
export const BACKLOG_EVERY_MS = 500;
const REPORT_FRESH_MS = 3000;

const backlogSubject = (nats: Nats) => `${nats.topology.prefix}.rt.backlog`;
const loadSubject = (nats: Nats) => `${nats.topology.prefix}.rt.load`;

export function publishBacklog(nats: Nats, report: TranscriberBacklog): void {
  publishReport(nats, backlogSubject(nats), report);
}

export function publishVadLoad(nats: Nats, report: VadLoad): void {
  publishReport(nats, loadSubject(nats), report);
}

function publishReport(nats: Nats, subject: string, report: object): void {
  try {
    nats.nc.publish(subject, JSON.stringify(report));
  } catch {
    // the connection is closed or draining: a lost report is what freshness is for
  }
}

/** The fresh reports of a subject, the latest one per replica. */
function watchReports<T extends { replica: string; at: number }>(nats: Nats, subject: string, schema: z.ZodType<T>, now: () => number) {
  const latest = new Map<string, T>();
  const sub: Subscription = nats.nc.subscribe(subject, {
    callback: (_err, msg) => {
      try {
        const parsed = schema.safeParse(msg.json());
        if (parsed.success) latest.set(parsed.data.replica, parsed.data);
      } catch {
        // not JSON: ignore
      }
    },
  });
  const reports = () => {
    const t = now();
    for (const [k, r] of latest) if (t - r.at > REPORT_FRESH_MS) latest.delete(k);
    return [...latest.values()];
  };
  return { reports, stop: () => sub.unsubscribe() };
}

export interface BacklogView {
  /** Fresh reports, one per replica. */
  reports(): TranscriberBacklog[];
  /** A fresh report that says saturated, if any (admission refuses while there is one). */
  saturated(): TranscriberBacklog | undefined;
  stop(): void;
}

export function watchBacklog(nats: Nats, now: () => number = Date.now): BacklogView {
  const feed = watchReports(nats, backlogSubject(nats), transcriberBacklog, now);
  return { reports: feed.reports, saturated: () => feed.reports().find((r) => r.saturated), stop: feed.stop };
}

export interface VadLoadView {
  /** The worst of the fresh VAD reports (lag, loop delay and engine load each), or null when none is fresh. */
  worst(): { lagMs: number; loopDelayMs: number; engine: EngineLoad | null } | null;
  stop(): void;
}

/** The streaming engine's load on the busiest VAD replica: share of its machine's cores, the share one speaker costs there, and whether its pool is full. */
interface EngineLoad {
  load: number;
  perSpeaker: number;
  full: boolean;
}

export function watchVadLoad(nats: Nats, now: () => number = Date.now): VadLoadView {
  const feed = watchReports(nats, loadSubject(nats), vadLoad, now);
  return {
    worst() {
      const reports = feed.reports();
      if (reports.length === 0) return null;
      const engines = reports.flatMap((r) => (r.engine ? [r.engine] : []));
      const busiest = engines.reduce<(typeof engines)[number] | null>((a, e) => (!a || e.load > a.load ? e : a), null);
      const engine: EngineLoad | null = busiest && {
        load: busiest.load,
        perSpeaker: busiest.per_speaker,
        full: engines.some((e) => e.size > 0 && e.busy >= e.size),
      };
      return { lagMs: Math.max(...reports.map((r) => r.lag_ms)), loopDelayMs: Math.max(...reports.map((r) => r.loop_delay_ms)), engine };
    },
    stop: feed.stop,
  };
}

/** One view per connection, opened by the first caller (admission consults it per upgrade). */
const views = new WeakMap<Nats, BacklogView>();
export function sharedBacklogView(nats: Nats): BacklogView {
  let v = views.get(nats);
  if (!v) {
    v = watchBacklog(nats);
    views.set(nats, v);
  }
  return v;
}
