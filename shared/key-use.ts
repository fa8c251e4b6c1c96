import { keyEventEnvelope, type KeyEvent } from "../schemas/keys";
import type { Principal } from "./auth";
import { appendEvents } from "./event-store";
import type { Logger } from "./logger";
import type { Nats } from "./nats";

const USE_RESOLUTION_MS = 60_000;
const lastNoted = new Map<string, number>();

/**
 * Records that a key was used, for `lastUsedAt`: at most one KeyUsed event per key per
 * minute (the msgID is the key and minute, so several gateways dedupe to one).
 * Fire-and-forget: a failure here never fails the request.
 */
export function noteKeyUse(nats: Nats, principal: Principal, now: Date, logger: Logger): void {
  const minute = Math.floor(now.getTime() / USE_RESOLUTION_MS);
  if (principal.lastUsedAt && Math.floor(principal.lastUsedAt.getTime() / USE_RESOLUTION_MS) === minute) return;
  if (lastNoted.get(principal.keyId) === minute) return;
  lastNoted.set(principal.keyId, minute);
  if (lastNoted.size > 100_000) lastNoted.clear();
  appendEvents<KeyEvent>(nats.js, keyEventEnvelope, nats.topology.subjects.keyEvent(principal.keyId), [
    { type: "KeyUsed", data: { keyId: principal.keyId, usedAt: now.toISOString() }, msgId: `${principal.keyId}:used:${minute}` },
  ]).catch((err) => logger.warn("could not record key use", { keyId: principal.keyId, error: String(err) }));
}
