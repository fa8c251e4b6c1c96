import { randomBytes } from "node:crypto";
import type { KV } from "@nats-io/kv";
import { AppError } from "../../shared/errors";

/**
 * A short lease per running step in the NATS KV `leases` bucket, so one step runs in
 * one place at a time even when JetStream hands its command out twice (a redelivery
 * racing a slow handler, a replica that stopped while its pull was still open, a
 * replica that is merely slow). Delivery stays at-least-once; the lease only stops
 * two replicas from doing the same expensive work at the same moment, and the
 * checkpoint makes a later repeat cheap.
 *
 * The lease carries its expiry and is renewed while the step runs; a replica that
 * dies leaves a lease that expires after `ttlMs` and is then taken over with a
 * compare-and-set on the entry's revision.
 */
export interface StepLease {
  release(): Promise<void>;
}

interface LeaseValue {
  holder: string;
  exp: number;
}

/** The step is leased elsewhere; `retryInMs` is when the lease would expire. */
export class StepBusy extends AppError {
  constructor(step: string, readonly retryInMs: number, cause?: unknown) {
    super("conflict", "step_busy", `${step} is running elsewhere`, { retryable: true, cause });
  }
}

const leaseKey = (workflowId: string, step: string) => `job.${workflowId}.${step}`;

export function createStepLeases(kv: () => Promise<KV>, options: { ttlMs: number; now?: () => number }) {
  const now = options.now ?? Date.now;

  /**
   * Takes the lease or throws a retryable `step_busy`. Not re-entrant: a second copy of
   * the same command in the same process is refused like any other.
   */
  async function acquire(workflowId: string, step: string): Promise<StepLease> {
    const holder = randomBytes(8).toString("hex");
    const encode = () => JSON.stringify({ holder, exp: now() + options.ttlMs } satisfies LeaseValue);
    const bucket = await kv();
    const key = leaseKey(workflowId, step);
    let revision: number;
    try {
      revision = await bucket.create(key, encode());
    } catch {
      const entry = await bucket.get(key);
      const current = entry && entry.operation === "PUT" ? (entry.json() as LeaseValue) : undefined;
      if (current && current.exp > now()) {
        throw new StepBusy(step, current.exp - now());
      }
      try {
        revision = entry ? await bucket.update(key, encode(), entry.revision) : await bucket.create(key, encode());
      } catch (err) {
        throw new StepBusy(step, 1000, err);
      }
    }
    let released = false;
    let renewing: Promise<void> = Promise.resolve();
    const renew = setInterval(() => {
      renewing = bucket
        .update(key, encode(), revision)
        .then((r) => {
          revision = r;
        })
        .catch(() => {
          // Lost the lease (expired and taken over): the work's result is still idempotent.
        });
    }, Math.max(500, Math.floor(options.ttlMs / 3)));
    renew.unref();
    return {
      async release() {
        if (released) return;
        released = true;
        clearInterval(renew);
        // A renewal in flight would move the revision under the delete: wait for it.
        await renewing;
        await bucket.delete(key, { previousSeq: revision }).catch(async () => {
          // Still ours (same holder) under another revision? Then delete that one.
          const entry = await bucket.get(key).catch(() => null);
          if (entry?.operation === "PUT" && (entry.json() as LeaseValue).holder === holder) {
            await bucket.delete(key, { previousSeq: entry.revision }).catch(() => undefined);
          }
        });
      },
    };
  }

  return { acquire };
}
