/**
 * How one fetcher replica shares its work between owners.
 *
 * Downloads and decodes are gated apart. A download is mostly waiting on someone
 * else's server, so a replica holds several (`JOB_FETCH_CONCURRENCY`, default 8), and an
 * owner may hold at most half of them (at least one): however many slow origins one
 * owner points at, the other half stays free for everyone else. A command over its
 * owner's share goes back to the stream for a while (`ownerShare.tryTake` answers no)
 * rather than wait in the replica's hands, where it would block the pull behind it.
 *
 * Decoding is CPU, so fewer run at once (`JOB_DECODE_CONCURRENCY`, default 2); a
 * downloaded file waits for a decode slot in the replica, and a freed slot goes to the
 * waiting owner with the fewest decodes running, oldest first among equals.
 *
 * Both are per replica: with several replicas each keeps its own half free.
 */
export interface OwnerShare {
  /** Takes one of the owner's slots: the release function, or undefined when the owner holds its share. */
  tryTake(owner: string): (() => void) | undefined;
  /** Slots one owner may hold. */
  readonly perOwner: number;
}

export function createOwnerShare(slots: number): OwnerShare {
  const perOwner = Math.max(1, Math.floor(slots / 2));
  const held = new Map<string, number>();
  return {
    perOwner,
    tryTake(owner) {
      const n = held.get(owner) ?? 0;
      if (n >= perOwner) return undefined;
      held.set(owner, n + 1);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        const left = (held.get(owner) ?? 1) - 1;
        if (left > 0) held.set(owner, left);
        else held.delete(owner);
      };
    },
  };
}

export interface FairSlots {
  /** Waits for a slot (fewest-running owner first); rejects with the signal's reason if it aborts first. */
  acquire(owner: string, signal?: AbortSignal): Promise<() => void>;
}

export function createFairSlots(slots: number): FairSlots {
  const running = new Map<string, number>();
  let total = 0;
  const waiting: { owner: string; grant: () => void }[] = [];

  const take = (owner: string): (() => void) => {
    total++;
    running.set(owner, (running.get(owner) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      total--;
      const left = (running.get(owner) ?? 1) - 1;
      if (left > 0) running.set(owner, left);
      else running.delete(owner);
      pump();
    };
  };

  const pump = () => {
    while (total < slots && waiting.length > 0) {
      let best = 0;
      for (let i = 1; i < waiting.length; i++) {
        if ((running.get(waiting[i]!.owner) ?? 0) < (running.get(waiting[best]!.owner) ?? 0)) best = i;
      }
      waiting.splice(best, 1)[0]!.grant();
    }
  };

  return {
    acquire(owner, signal) {
      if (signal?.aborted) return Promise.reject(signal.reason);
      if (total < slots && waiting.length === 0) return Promise.resolve(take(owner));
      return new Promise((resolve, reject) => {
        const entry = {
          owner,
          grant: () => {
            signal?.removeEventListener("abort", onAbort);
            resolve(take(owner));
          },
        };
        const onAbort = () => {
          const i = waiting.indexOf(entry);
          if (i >= 0) waiting.splice(i, 1);
          reject(signal!.reason);
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        waiting.push(entry);
      });
    },
  };
}
