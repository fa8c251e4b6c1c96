import type { KV } from "@nats-io/kv";
import { workerAnnouncement, type WorkerAnnouncement } from "../../schemas/segment";
import type { Logger } from "../logger";
import type { Nats } from "../nats";
import { safeJson } from "../json";

/**
 * Live view of the worker registry bucket (topology.buckets.workers): one key per
 * worker, refreshed by its heartbeats, deleted when it stops, expired by the bucket's
 * TTL when it dies. An entry whose heartbeat is older than `staleMs` counts as gone
 * even before the bucket expires it.
 *
 * The watch is re-opened after every NATS reconnect (a restarted nats-server has lost
 * the memory-backed bucket and the watch's ephemeral consumer with it); the new watch's
 * snapshot replaces the view once it has arrived, so the view never empties meanwhile.
 *
 * `markDead` is the router's evidence that a worker is gone or frozen before its entry
 * is: a request to it found no responders, or an attempt on it timed out (a stopped
 * process still holds its subscription, so NATS delivers to it and nobody answers). The
 * worker is left out of the view until it announces itself again with a newer
 * heartbeat: a frozen process sends none until it runs again.
 */
export interface WorkerRegistry {
  /** Workers with a fresh heartbeat. */
  list(): WorkerAnnouncement[];
  get(id: string): WorkerAnnouncement | undefined;
  /** Leaves `id` out until a heartbeat newer than its current one arrives. */
  markDead(id: string): void;
  /** Ids in the view that `markDead` left out and that have not announced themselves since. */
  leftOut(): string[];
  /**
   * True when `id` is registered but has not announced itself for longer than `staleMs`:
   * it died without deleting its entry (a worker that stops deletes it first), so a clip
   * it holds will never be answered. Never while the watch is blind.
   */
  lost(id: string): boolean;
  stop(): Promise<void>;
}

type Watch = Awaited<ReturnType<KV["watch"]>>;

/** Engine capacity: clips at once, and real-time streams of continuous speech. */
export interface EngineCapacity {
  requests: number;
  streams: number;
}

/**
 * What a worker announces it carries. `requests` is its concurrency: clips beyond it
 * queue inside the worker (and only add latency). `streams` is how many speakers
 * talking without pause it keeps up with: each slot does 1 ÷ realTimeFactor seconds of
 * audio per second, so concurrency ÷ realTimeFactor (rounded down to 0.1). The factor
 * is the announced one (the worse of declared and observed), so a loaded CPU announces
 * fewer streams.
 */
export function announcedCapacity(concurrency: number, realTimeFactor: number): EngineCapacity {
  return { requests: concurrency, streams: Math.floor((concurrency / Math.max(realTimeFactor, 0.001)) * 10) / 10 };
}

/** A worker's capacity: announced, or derived for a worker that does not announce it. */
export function capacityOf(w: WorkerAnnouncement): EngineCapacity {
  return w.capacity ?? announcedCapacity(w.concurrency, w.realTimeFactor);
}

/** Capacity of the warm workers together (cold ones take no clips). */
export function warmCapacity(workers: WorkerAnnouncement[]): EngineCapacity & { workers: number } {
  const warm = workers.filter((w) => w.warm);
  return warm.reduce((sum, w) => {
    const c = capacityOf(w);
    return { requests: sum.requests + c.requests, streams: Math.round((sum.streams + c.streams) * 10) / 10, workers: sum.workers + 1 };
  }, { requests: 0, streams: 0, workers: 0 });
}

export async function watchWorkerRegistry(nats: Nats, options: { staleMs: number; now?: () => number; logger?: Logger }): Promise<WorkerRegistry> {
  const now = options.now ?? Date.now;
  let workers = new Map<string, WorkerAnnouncement>();
  /** Worker id → the heartbeat time (`at`) of the announcement that was found dead. */
  const dead = new Map<string, number>();
  let current: Watch | undefined;
  let stopped = false;
  /** When the watch last delivered anything (real time, not the `now` option). */
  let lastEntryAt = Date.now();
  /** The watch went silent and no new one could be opened yet (see the watchdog). */
  let blind = false;

  /** Opens a watch; resolves once its snapshot is in the view (or after a short grace). */
  const open = async (): Promise<void> => {
    const kv: KV = await nats.kv("workers");
    const iter: Watch = await kv.watch({ key: ">" });
    const previous = current;
    current = iter;
    previous?.stop();
    const snapshot = new Map<string, WorkerAnnouncement>();
    let live = false;
    let initialised: () => void = () => undefined;
    const ready = new Promise<void>((r) => (initialised = r));
    const goLive = () => {
      if (live || current !== iter) return;
      live = true;
      workers = snapshot;
      initialised();
    };
    (async () => {
      for await (const e of iter) {
        if (current === iter) lastEntryAt = Date.now();
        if (e.operation === "PUT") {
          const parsed = workerAnnouncement.safeParse(safeJson(e.string()));
          if (parsed.success) snapshot.set(e.key, parsed.data);
          else options.logger?.warn("ignoring malformed worker announcement", { key: e.key });
        } else {
          snapshot.delete(e.key);
        }
        if (e.delta === 0) goLive();
      }
    })().catch((err) => options.logger?.warn("worker registry watch ended", { error: String(err) }));
    // An empty bucket sends nothing; don't wait on it past a short grace.
    const timer = setTimeout(goLive, 1000);
    const status = await kv.status().catch(() => undefined);
    if (!status || status.values === 0) goLive();
    await ready;
    clearTimeout(timer);
  };

  await open();
  const unhook = nats.onReconnect(async () => {
    if (!stopped) await open();
  });
  // A watch can die without a word: in a cluster, its consumer lives on one node, and
  // when that node dies nats.js only notices after missed heartbeats and may fail to
  // re-create it while the stream elects a leader. Live workers re-announce themselves
  // every heartbeat, so a view with workers in it that has heard nothing for half of
  // `staleMs` is a dead watch (or every worker died): open a new one. Until that works
  // the registry is blind: heartbeats cannot be seen, so their age is no evidence and
  // the last view is trusted (a worker that is really gone answers "no responders",
  // which marks it dead). Checked every staleMs / 4.
  let reopening = false;
  const watchdog = setInterval(() => {
    if (stopped || reopening || workers.size === 0 || Date.now() - lastEntryAt < options.staleMs / 2) return;
    reopening = true;
    blind = true;
    options.logger?.warn("worker registry watch silent; re-opening it", { silentMs: Date.now() - lastEntryAt });
    open()
      .then(() => (blind = false))
      .catch((err) => options.logger?.warn("re-opening the worker registry watch failed", { error: String(err) }))
      .finally(() => {
        reopening = false;
        lastEntryAt = Date.now();
      });
  }, Math.max(100, options.staleMs / 4));
  watchdog.unref();

  const fresh = (w: WorkerAnnouncement) => (blind || now() - w.at <= options.staleMs) && !(w.at <= (dead.get(w.id) ?? -Infinity));
  return {
    list: () => [...workers.values()].filter(fresh),
    get: (id) => {
      const w = workers.get(id);
      return w && fresh(w) ? w : undefined;
    },
    leftOut: () => [...workers.values()].filter((w) => w.at <= (dead.get(w.id) ?? -Infinity)).map((w) => w.id),
    lost: (id) => {
      const w = workers.get(id);
      return !blind && w !== undefined && now() - w.at > options.staleMs;
    },
    markDead: (id) => {
      const w = workers.get(id);
      if (w) dead.set(id, w.at);
      // forget marks of workers that are gone for good
      for (const [k] of dead) if (!workers.has(k)) dead.delete(k);
    },
    stop: async () => {
      stopped = true;
      clearInterval(watchdog);
      unhook();
      current?.stop();
    },
  };
}
