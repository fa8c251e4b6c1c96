import type { KV } from "@nats-io/kv";
import { liveLeases, updateLeaseEntry } from "../../shared/lease-entry";
import type { Logger } from "../../shared/logger";

/**
 * Which VAD replica consumes which RT_AUDIO partition. One KV entry (`vad.assignment`
 * in the `leases` bucket) holds the live members and the owner of each partition, each
 * with an expiry, and is only ever changed by compare-and-set. Every ttl/3 a replica
 * renews its membership and its partitions and moves toward its fair share of the
 * partitions (members sorted by id; the first `P mod N` take one more): it claims free
 * or expired partitions up to its share, and a partition over its share is stopped
 * first and released after, so a partition never has two consumers on purpose.
 *
 * A replica that dies stops renewing; its partitions are free once their expiry passes
 * and the others claim them on their next tick (at most ttl + ttl/3 later). A replica
 * frozen past its expiry (a long GC pause, SIGSTOP) may handle a few messages after the
 * new owner started; it stops them at its next tick, and the events it published
 * twice carry the same msg ids (deduplicated by the stream).
 */
export interface AssignmentTable {
  members: Record<string, { exp: number }>;
  /** Keyed by partition number. */
  owners: Record<string, { member: string; exp: number }>;
}

export interface AssignmentPlan {
  next: AssignmentTable;
  /** Owned now and not running here: start them. */
  start: number[];
  /** Running here but owned by another live member (our lease lapsed): stop now. */
  lost: number[];
  /** Running here but over our share: stop, then release. */
  surplus: number[];
}

export const ASSIGNMENT_KEY = "vad.assignment";
export const emptyTable = (): AssignmentTable => ({ members: {}, owners: {} });

/** The fair share of `member` among `members` (sorted ids) for `partitions`. */
export function fairShare(members: string[], member: string, partitions: number): number {
  const ids = [...members].sort();
  const i = ids.indexOf(member);
  return Math.floor(partitions / ids.length) + (i < partitions % ids.length ? 1 : 0);
}

/** One replica's tick, pure: renew, take up to the share, mark surplus and lost. */
export function planAssignment(table: AssignmentTable, me: string, partitions: number, running: ReadonlySet<number>, now: number, ttlMs: number): AssignmentPlan {
  const members = liveLeases(table.members, now);
  members[me] = { exp: now + ttlMs };
  const owners: AssignmentTable["owners"] = {};
  for (const [p, o] of Object.entries(liveLeases(table.owners, now))) {
    if (o.member in members && Number(p) < partitions) owners[p] = o;
  }
  const lease = { member: me, exp: now + ttlMs };
  const lost = [...running].filter((p) => owners[p] !== undefined && owners[p].member !== me).sort((a, b) => a - b);
  const mine: number[] = [];
  for (let p = 0; p < partitions; p++) {
    if (owners[p]?.member === me || (running.has(p) && owners[p] === undefined)) mine.push(p);
  }
  const share = fairShare(Object.keys(members), me, partitions);
  const start: number[] = [];
  const surplus: number[] = [];
  mine.forEach((p, i) => {
    if (i < share) {
      owners[p] = lease;
      if (!running.has(p)) start.push(p);
    } else if (running.has(p)) {
      owners[p] = lease; // still ours until it has stopped
      surplus.push(p);
    } else {
      delete owners[p];
    }
  });
  let need = share - Math.min(share, mine.length);
  for (let p = 0; p < partitions && need > 0; p++) {
    if (owners[p] === undefined) {
      owners[p] = lease;
      start.push(p);
      need--;
    }
  }
  return { next: { members, owners }, start, lost, surplus };
}

/** Drops `me`'s ownership of `released` (and its membership when `leave`). */
export function releasePartitions(table: AssignmentTable, me: string, released: number[], leave = false): AssignmentTable | null {
  const owners = { ...table.owners };
  let changed = false;
  for (const p of released) {
    if (owners[p]?.member === me) {
      delete owners[p];
      changed = true;
    }
  }
  const members = { ...table.members };
  if (leave && me in members) {
    delete members[me];
    changed = true;
  }
  return changed ? { members, owners } : null;
}

export interface PartitionAssignmentOptions {
  memberId: string;
  partitions: number;
  ttlMs: number;
  logger: Logger;
  /** Starts consuming a partition (resolves once it consumes). */
  start(partition: number): Promise<void>;
  /**
   * Stops consuming a partition. `handover`: every message it took is handled and
   * acked (we still own it). `lost`: another replica may own the durable now, so
   * nothing more is acked (an ack could land on the new owner's durable).
   */
  stop(partition: number, how: "handover" | "lost"): Promise<void>;
  now?: () => number;
}

export interface PartitionAssignment {
  owned(): number[];
  /** Runs one tick now (also what the timer runs); ticks never overlap. */
  tick(): Promise<void>;
  /** Stops every partition, then releases them and leaves. */
  stop(): Promise<void>;
}

/** Joins the assignment and runs its first tick before resolving. */
export async function joinPartitionAssignment(kv: KV, o: PartitionAssignmentOptions): Promise<PartitionAssignment> {
  const now = o.now ?? Date.now;
  const running = new Set<number>();
  let stopped = false;
  let renewedAt = now();
  let chain: Promise<void> = Promise.resolve();

  const release = (partitions: number[], leave = false) =>
    updateLeaseEntry(kv, ASSIGNMENT_KEY, emptyTable, (t) => releasePartitions(t, o.memberId, partitions, leave));

  const runTick = async () => {
    if (stopped) return;
    let plan: AssignmentPlan | undefined;
    await updateLeaseEntry(kv, ASSIGNMENT_KEY, emptyTable, (t) => {
      plan = planAssignment(t, o.memberId, o.partitions, running, now(), o.ttlMs);
      return plan.next;
    });
    if (!plan) return;
    renewedAt = now();
    for (const p of plan.lost) {
      o.logger.warn("vad partition taken over by another replica", { partition: p });
      running.delete(p);
      await o.stop(p, "lost");
    }
    for (const p of plan.surplus) {
      running.delete(p);
      await o.stop(p, "handover");
    }
    if (plan.surplus.length) {
      await release(plan.surplus);
      o.logger.info("vad partitions handed over", { partitions: plan.surplus });
    }
    const failed: number[] = [];
    for (const p of plan.start) {
      try {
        await o.start(p);
        running.add(p);
      } catch (err) {
        o.logger.warn("vad partition did not start", { partition: p, error: (err as Error).message });
        failed.push(p);
      }
    }
    if (failed.length) await release(failed);
    if (plan.start.length > failed.length) o.logger.info("vad partitions taken", { partitions: plan.start.filter((p) => !failed.includes(p)) });
  };

  // Fencing: a replica that could not renew for a whole TTL may have lost its partitions
  // to another without knowing; it stops them rather than risk two consumers on one.
  const fence = async () => {
    if (running.size === 0 || now() - renewedAt <= o.ttlMs) return;
    o.logger.warn("vad partition leases not renewed for a whole TTL; stopping them", { partitions: [...running] });
    const held = [...running];
    running.clear();
    for (const p of held) await o.stop(p, "lost");
  };

  const tick = () => {
    chain = chain.then(runTick).catch(async (err) => {
      o.logger.warn("vad partition assignment tick failed", { error: (err as Error).message });
      await fence();
    });
    return chain;
  };

  await tick();
  const timer = setInterval(() => void tick(), Math.max(200, Math.floor(o.ttlMs / 3)));
  timer.unref();

  return {
    owned: () => [...running].sort((a, b) => a - b),
    tick,
    async stop() {
      clearInterval(timer);
      await chain;
      stopped = true;
      const held = [...running];
      running.clear();
      for (const p of held) await o.stop(p, "handover");
      await release(held, true).catch((err) => o.logger.warn("vad partitions not released (they expire)", { error: (err as Error).message }));
    },
  };
}
