import type { Subscription } from "@nats-io/transport-node";
import type { z } from "zod";
import { transcriberBacklog, vadLoad, type TranscriberBacklog, type VadLoad } from "../schemas/realtime-internal";
import type { Nats } from "./nats";

/**
 * The realtime plane's load reports on core NATS: the rt-transcribers' backlog
 * (schemas/realtime.ts `transcriberBacklog`, `<prefix>.rt.backlog`) and the VADs' lag
 * and loop delay (`vadLoad`, `<prefix>.rt.load`). At most once a replica's interval,
 * lost when nobody listens, which is fine: a report older than `REPORT_FRESH_MS` no
 * longer counts as a replica, and one older than `REFUSES_FOR_MS` (two intervals) no
 * longer refuses upgrades, so a replica that died, or a stack stopped before this one,
 * stops refusing within a second.
 */
export const BACKLOG_EVERY_MS = 500;
const REPORT_FRESH_MS = 3000;
/**
 * A report refuses upgrades only while it describes now: younger than its interval, with
 * as much again for a publisher's late timer and the trip. An older one is stale (its
 * replica stopped, or a stack before this one) and no longer refuses anything.
 */
const REFUSES_FOR_MS = 2 * BACKLOG_EVERY_MS;

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
  const reports = (maxAgeMs = REPORT_FRESH_MS) => {
    const t = now();
    for (const [k, r] of latest) if (t - r.at > REPORT_FRESH_MS) latest.delete(k);
    return [...latest.values()].filter((r) => t - r.at <= maxAgeMs);
  };
  return { reports, stop: () => sub.unsubscribe() };
}

export interface BacklogView {
  /** Fresh reports, one per replica. */
  reports(): TranscriberBacklog[];
  /** A report younger than REFUSES_FOR_MS that says saturated, if any (admission refuses while there is one). */
  saturated(): TranscriberBacklog | undefined;
  stop(): void;
}

export function watchBacklog(nats: Nats, now: () => number = Date.now): BacklogView {
  const feed = watchReports(nats, backlogSubject(nats), transcriberBacklog, now);
  return { reports: () => feed.reports(), saturated: () => feed.reports(REFUSES_FOR_MS).find((r) => r.saturated), stop: feed.stop };
}

export interface VadLoadView {
  /** The worst of the VAD reports younger than REFUSES_FOR_MS (lag, loop delay and engine each), or null when none is. */
  worst(): { lagMs: number; loopDelayMs: number; engine: EngineLoad | null } | null;
  stop(): void;
}

/**
 * The streaming engine on the busiest VAD replica (the most speakers' worth of its
 * machine): its speakers still talking, the share of the machine one costs there, the
 * share its decoders used over the interval (for the log: it includes transient decodes
 * of utterances already committed), and whether every decoder is held by a speaker.
 */
interface EngineLoad {
  speakers: number;
  perSpeaker: number;
  load: number;
  full: boolean;
}

export function watchVadLoad(nats: Nats, now: () => number = Date.now): VadLoadView {
  const feed = watchReports(nats, loadSubject(nats), vadLoad, now);
  return {
    worst() {
      const reports = feed.reports(REFUSES_FOR_MS);
      if (reports.length === 0) return null;
      const engines = reports.flatMap((r) => (r.engine ? [{ ...r.engine, speakers: r.engine.speakers ?? r.engine.busy }] : []));
      const busiest = engines.reduce<(typeof engines)[number] | null>((a, e) => (!a || e.speakers * e.per_speaker > a.speakers * a.per_speaker ? e : a), null);
      const engine: EngineLoad | null = busiest && {
        speakers: busiest.speakers,
        perSpeaker: busiest.per_speaker,
        load: busiest.load,
        // a speaker in a pause holds no decoder: full is every decoder held by an open utterance
        full: engines.some((e) => e.size > 0 && (e.held ?? e.speakers) >= e.size),
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
