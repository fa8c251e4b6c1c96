import type { KV } from "@nats-io/kv";
import { KnownRevisions, liveLeases, updateLeaseEntry } from "../../shared/lease-entry";

/**
 * `maxConcurrentUtterances` across every transcriber replica: one KV entry per session
 * (`utt.<sessionId>` in the `leases` bucket) listing that session's utterances now in
 * the worker router, each with an expiry. Taking a slot is a compare-and-set on the
 * entry, so two replicas cannot both take a session's last slot. A slot of a replica
 * that died mid-utterance stops counting after `ttlMs` (its command is redelivered
 * after the consumer's ack wait and takes the slot again under the same item id).
 * The replica remembers the revision it wrote last per session, so taking and freeing
 * slots of a session no other replica touched meanwhile is one write each, not a read
 * and a write.
 */
interface SlotSet {
  items: Record<string, { exp: number }>;
}

const slotKey = (sessionId: string) => `utt.${sessionId}`;
const emptySet = (): SlotSet => ({ items: {} });

export interface UtteranceSlots {
  /** True when `itemId` holds one of the session's `max` slots (re-entrant per item). */
  tryAcquire(sessionId: string, itemId: string, max: number): Promise<boolean>;
  release(sessionId: string, itemId: string): Promise<void>;
}

export function createUtteranceSlots(kv: KV, ttlMs: number, now: () => number = Date.now): UtteranceSlots {
  const known = new KnownRevisions();
  return {
    async tryAcquire(sessionId, itemId, max) {
      let taken = false;
      await updateLeaseEntry(kv, slotKey(sessionId), emptySet, (set) => {
        const items = liveLeases(set.items, now());
        taken = itemId in items || Object.keys(items).length < max;
        if (!taken) return null;
        items[itemId] = { exp: now() + ttlMs };
        return { items };
      }, { known });
      return taken;
    },
    async release(sessionId, itemId) {
      await updateLeaseEntry(kv, slotKey(sessionId), emptySet, (set) => {
        if (!(itemId in set.items)) return null;
        const items = liveLeases(set.items, now());
        delete items[itemId];
        return { items };
      }, { known });
    },
  };
}
