import type { KV } from "@nats-io/kv";
import { AppError } from "../../shared/errors";
import { liveLeases, updateLeaseEntry } from "../../shared/lease-entry";

/**
 * Concurrent-connection leases shared by every gateway on one NATS: one KV entry per
 * API key (`conn.<keyId>`) holding that key's open sessions, each with the gateway that
 * owns it and an expiry. Admission and release are compare-and-set loops on the entry's
 * revision, so two gateways admitting at once cannot both take the last slot. Gateways
 * renew their leases every ttl/3; a lease of a gateway that died stops counting when
 * its expiry passes (nats-server 2.9 has no per-key TTL, so expiry lives in the value;
 * the bucket's own max-age only garbage-collects abandoned entries).
 */
interface LeaseSet {
  leases: Record<string, { gw: string; exp: number }>;
}

const entryKey = (keyId: string) => `conn.${keyId}`;
const emptySet = (): LeaseSet => ({ leases: {} });

function live(set: LeaseSet, nowMs: number): LeaseSet {
  return { leases: liveLeases(set.leases, nowMs) };
}

async function mutate(kv: KV, keyId: string, change: (set: LeaseSet) => LeaseSet | null): Promise<void> {
  await updateLeaseEntry(kv, entryKey(keyId), emptySet, change);
}

export interface Leases {
  /** Takes a slot for `sessionId` or throws 429 too_many_connections. */
  acquire(keyId: string, sessionId: string, max: number): Promise<void>;
  release(keyId: string, sessionId: string): Promise<void>;
  /** Stops renewing (leases of this gateway then expire within the TTL). */
  stop(): void;
}

export function createLeases(kv: KV, gatewayId: string, ttlMs: number, now: () => number = Date.now): Leases {
  const held = new Map<string, string>(); // sessionId -> keyId
  const renew = async () => {
    const byKey = new Map<string, string[]>();
    for (const [sid, kid] of held) byKey.set(kid, [...(byKey.get(kid) ?? []), sid]);
    for (const [keyId, sessions] of byKey) {
      await mutate(kv, keyId, (set) => {
        const next = live(set, now());
        for (const sid of sessions) if (held.has(sid)) next.leases[sid] = { gw: gatewayId, exp: now() + ttlMs };
        return next;
      }).catch(() => undefined);
    }
  };
  const timer = setInterval(() => void renew(), Math.max(250, Math.floor(ttlMs / 3)));
  timer.unref();
  return {
    async acquire(keyId, sessionId, max) {
      await mutate(kv, keyId, (set) => {
        const next = live(set, now());
        if (Object.keys(next.leases).length >= max) {
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
      await mutate(kv, keyId, (set) => {
        if (!set.leases[sessionId]) return null;
        const next = live(set, now());
        delete next.leases[sessionId];
        return next;
      });
    },
    stop() {
      clearInterval(timer);
    },
  };
}
