import type { Subscription } from "@nats-io/transport-node";
import { transcriberBacklog, type TranscriberBacklog } from "../schemas/realtime";
import type { Nats } from "./nats";

/**
 * The rt-transcribers' backlog reports (schemas/realtime.ts `transcriberBacklog`) on
 * core NATS: at most once a replica's interval, lost when nobody listens, which is
 * fine: a report older than `BACKLOG_FRESH_MS` no longer counts, so a replica that
 * died stops refusing upgrades within that time.
 */
export const BACKLOG_EVERY_MS = 500;
const BACKLOG_FRESH_MS = 3000;

const backlogSubject = (nats: Nats) => `${nats.topology.prefix}.rt.backlog`;

export function publishBacklog(nats: Nats, report: TranscriberBacklog): void {
  nats.nc.publish(backlogSubject(nats), JSON.stringify(report));
}

export interface BacklogView {
  /** Fresh reports, one per replica. */
  reports(): TranscriberBacklog[];
  /** A fresh report that says saturated, if any (admission refuses while there is one). */
  saturated(): TranscriberBacklog | undefined;
  stop(): void;
}

export function watchBacklog(nats: Nats, now: () => number = Date.now): BacklogView {
  const latest = new Map<string, TranscriberBacklog>();
  const sub: Subscription = nats.nc.subscribe(backlogSubject(nats), {
    callback: (_err, msg) => {
      try {
        const parsed = transcriberBacklog.safeParse(msg.json());
        if (parsed.success) latest.set(parsed.data.replica, parsed.data);
      } catch {
        // not JSON: ignore
      }
    },
  });
  const reports = () => {
    const t = now();
    for (const [k, r] of latest) if (t - r.at > BACKLOG_FRESH_MS) latest.delete(k);
    return [...latest.values()];
  };
  return {
    reports,
    saturated: () => reports().find((r) => r.saturated),
    stop: () => sub.unsubscribe(),
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
