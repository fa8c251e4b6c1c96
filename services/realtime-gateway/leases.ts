import type { KV } from "@nats-io/kv";
import { AppError } from "../../shared/errors";
import { createEntryBatcher, liveLeases, updateLeaseEntry } from "../../shared/lease-entry";

/**
 * Concurrent-connection leases shared by every gateway on one NATS: one KV entry per
 * API key (`conn.<keyId>`) holding that key's open sessions, each with the gateway that
 * owns it and an expiry. Admission and release are compare-and-set loops on the entry's
 * revision, so two gateways admitting at once cannot both take the last slot. Gateways
 * renew their leases every ttl/3; a lease of a gateway that died stops counting when
 * its expiry passes (nats-server 2.9 has no per-key TTL, so expiry lives in the value;
 * the bucket's own max-age only garbage-collects abandoned entries).
 *
 * Contention is handled here, not by the client: the changes of one key's entry made by
 * this gateway at the same moment (every client reconnecting after a restart) go in one
 * compare-and-set write (createEntryBatcher), and a lost race retries with jitter. A
 * release that still fails (NATS away) is not dropped: the renew timer keeps removing
 * the session from the entry until a write succeeds, so a closed session's slot is not
 * held until its lease expires.
 */
interface LeaseSet {
  leases: Record<string, { gw: string; exp: number }>;
}

const entryKey = (keyId: string) => `conn.${keyId}`;
const emptySet = (): LeaseSet => ({ leases: {} });

function live(set: LeaseSet, nowMs: number): LeaseSet {
  return { leases: liveLeases(set.leases, nowMs) };
}

export interface Leases {
  /** Takes a slot for `sessionId` or throws 429 too_many_connections. */
  acquire(keyId: string, sessionId: string, max: number): Promise<void>;
  release(keyId: string, sessionId: string): Promise<void>;
  /** Stops renewing a session's lease without removing it: another gateway resumed the session and renews it now. */
  forget(sessionId: string): void;
  /** Stops renewing (leases of this gateway then expire within the TTL). */
  stop(): void;
}

export function createLeases(kv: KV, gatewayId: string, ttlMs: number, now: () => number = Date.now): Leases {
  const held = new Map<string, string>(); // sessionId -> keyId
  /** Sessions closed whose release has not been written yet: sessionId -> keyId. */
  const unreleased = new Map<string, string>();
  const changeEntry = createEntryBatcher<LeaseSet>((key, change) => updateLeaseEntry(kv, key, emptySet, change));
  const mutate = (keyId: string, change: (set: LeaseSet) => LeaseSet | null) => changeEntry(entryKey(keyId), change);
  const renew = async () => {
    const byKey = new Map<string, { renew: string[]; release: string[] }>();
    const of = (kid: string) => byKey.get(kid) ?? byKey.set(kid, { renew: [], release: [] }).get(kid)!;
    for (const [sid, kid] of held) of(kid).renew.push(sid);
    for (const [sid, kid] of unreleased) of(kid).release.push(sid);
    for (const [keyId, sessions] of byKey) {
      await mutate(keyId, (set) => {
        const next = live(set, now());
        for (const sid of sessions.renew) if (held.has(sid)) next.leases[sid] = { gw: gatewayId, exp: now() + ttlMs };
        for (const sid of sessions.release) delete next.leases[sid];
        return next;
      }).then(
        () => {
          for (const sid of sessions.release) unreleased.delete(sid);
        },
        () => undefined,
      );
    }
  };
  const timer = setInterval(() => void renew(), Math.max(250, Math.floor(ttlMs / 3)));
  timer.unref();
  return {
    async acquire(keyId, sessionId, max) {
      await mutate(keyId, (set) => {
        const next = live(set, now());
        // a resumed session takes its own slot again (held here or by the gateway it left)
        if (!next.leases[sessionId] && Object.keys(next.leases).length >= max) {
          throw new AppError("rate_limited", "too_many_connections", `This key already has ${max} open realtime connection${max === 1 ? "" : "s"}, the plan's maximum.`, {
            headers: { "Retry-After": "1" },
          });
        }
        next.leases[sessionId] = { gw: gatewayId, exp: now() + ttlMs };
        return next;
      });
      held.set(sessionId, keyId);
    },
    async release(keyId, sessionId) {
      held.delete(sessionId);
      try {
        await mutate(keyId, (set) => {
          if (!set.leases[sessionId]) return null;
          const next = live(set, now());
          delete next.leases[sessionId];
          return next;
        });
      } catch (err) {
        // written by the renew timer once NATS answers again
        unreleased.set(sessionId, keyId);
        throw err;
      }
    },
    forget(sessionId) {
      held.delete(sessionId);
    },
    stop() {
      clearInterval(timer);
    },
  };
}
