import type { KV } from "@nats-io/kv";
import { isCasConflict } from "../../shared/lease-entry";

/**
 * Exactly one kind of outcome per utterance, whatever redelivery does: before an item
 * is transcribed or failed `engine_overloaded`, its decision is written create-if-absent
 * to `utt_out.<sessionId>.<itemId>` in the `leases` bucket (10 min TTL, longer than any
 * redelivery). A redelivered command follows the decision already made: a dispatched
 * item is transcribed again (its `delta`/`completed` carry the same msg ids, so
 * JetStream drops the repeat), an expired one gets the same `failed` again (deduped
 * alike). So an item failed as overloaded never gets a `completed` after it.
 */
type OutcomeDecision = "transcribe" | "overloaded";

export interface OutcomeClaims {
  /** The decision that holds for the item: `wanted` if none was made before. */
  claim(sessionId: string, itemId: string, wanted: OutcomeDecision): Promise<OutcomeDecision>;
}

const key = (sessionId: string, itemId: string) => `utt_out.${sessionId}.${itemId}`;

export function createOutcomeClaims(kv: KV): OutcomeClaims {
  return {
    async claim(sessionId, itemId, wanted) {
      try {
        await kv.create(key(sessionId, itemId), wanted);
        return wanted;
      } catch (err) {
        if (!isCasConflict(err)) throw err;
        const e = await kv.get(key(sessionId, itemId));
        const made = e?.string();
        return made === "overloaded" || made === "transcribe" ? made : wanted;
      }
    },
  };
}
