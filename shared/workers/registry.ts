import type { KV } from "@nats-io/kv";
import { workerAnnouncement, type WorkerAnnouncement } from "../../schemas/segment";
import type { Logger } from "../logger";

/**
 * Live view of the worker registry bucket (topology.buckets.workers): one key per
 * worker, refreshed by its heartbeats, deleted when it stops, expired by the bucket's
 * TTL when it dies. An entry whose heartbeat is older than `staleMs` counts as gone
 * even before the bucket expires it.
 */
export interface WorkerRegistry {
  /** Workers with a fresh heartbeat. */
  list(): WorkerAnnouncement[];
  get(id: string): WorkerAnnouncement | undefined;
  stop(): Promise<void>;
}

export async function watchWorkerRegistry(kv: KV, options: { staleMs: number; now?: () => number; logger?: Logger }): Promise<WorkerRegistry> {
  const now = options.now ?? Date.now;
  const workers = new Map<string, WorkerAnnouncement>();
  const iter = await kv.watch({ key: ">" });
  let initialised: () => void = () => undefined;
  const ready = new Promise<void>((r) => (initialised = r));
  const timer = setTimeout(() => initialised(), 1000);
  (async () => {
    for await (const e of iter) {
      if (e.operation === "PUT") {
        const parsed = workerAnnouncement.safeParse(safeJson(e.string()));
        if (parsed.success) workers.set(e.key, parsed.data);
        else options.logger?.warn("ignoring malformed worker announcement", { key: e.key });
      } else {
        workers.delete(e.key);
      }
      if (e.delta === 0) initialised();
    }
  })().catch((err) => options.logger?.warn("worker registry watch ended", { error: String(err) }));
  // An empty bucket sends nothing; don't wait on it past a short grace.
  const status = await kv.status().catch(() => undefined);
  if (!status || status.values === 0) initialised();
  await ready;
  clearTimeout(timer);
  const fresh = (w: WorkerAnnouncement) => now() - w.at <= options.staleMs;
  return {
    list: () => [...workers.values()].filter(fresh),
    get: (id) => {
      const w = workers.get(id);
      return w && fresh(w) ? w : undefined;
    },
    stop: async () => {
      iter.stop();
    },
  };
}

function safeJson(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
}
