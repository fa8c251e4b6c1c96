import type { WorkerReply, WorkerRequestHeader } from "../../schemas/segment";

/**
 * Workers whose engine runs in this process, by worker id. The router hands such a
 * worker its clip by a function call instead of a core NATS request that goes to the
 * server and comes back to this same process: the 16 kHz PCM is neither framed nor
 * copied twice through nats-server, and the answer is not serialised. Everything else
 * is as over NATS: the worker is chosen from the registry the same way, the same
 * per-attempt timeout and deadline apply, the worker counts the clip in flight, and its
 * error answers (cold, deadline passed, engine errors) are the same replies.
 * A worker registers when it starts serving and unregisters first thing on stop; a
 * registry entry without a local handler (another process's worker, or a dead one) is
 * posted over NATS as before.
 */
export type LocalWorker = (header: WorkerRequestHeader, pcm: Int16Array) => Promise<WorkerReply>;

const localWorkers = new Map<string, LocalWorker>();

/** Registers this process's worker `id`; returns the unregister function. */
export function registerLocalWorker(id: string, serve: LocalWorker): () => void {
  localWorkers.set(id, serve);
  return () => {
    if (localWorkers.get(id) === serve) localWorkers.delete(id);
  };
}

export function localWorker(id: string): LocalWorker | undefined {
  return localWorkers.get(id);
}
