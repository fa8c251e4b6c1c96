import { sessionOpened } from "../../schemas/realtime";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";

/**
 * The owner (tenant) of a realtime session, for fair scheduling, when its utterance
 * command does not carry it (commands from a VAD or gateway before `owner_id` was
 * added): read once per session from its `rt.session.opened` fact on rt.evt.<sessionId>
 * (direct gets of the first few messages of the subject; the gateway appends it before
 * any audio flows) and cached. A session whose opened fact cannot be read is scheduled
 * as owner `key:<keyId>`, a turn of its own rather than no turn.
 */
export interface SessionOwners {
  ownerOf(sessionId: string, keyId: string): Promise<string>;
}

const SCAN = 5;
const CACHE_MAX = 10_000;

export function createSessionOwners(nats: Nats, logger: Logger): SessionOwners {
  const cache = new Map<string, string>();
  const stream = nats.topology.streams.rtEvents.name;
  const read = async (sessionId: string): Promise<string | undefined> => {
    const subject = nats.topology.subjects.rtEvent(sessionId);
    let seq = 0;
    for (let i = 0; i < SCAN; i++) {
      const m = await nats.jsm.direct.getMessage(stream, { seq: seq + 1, next_by_subj: subject });
      if (!m) return undefined;
      const parsed = sessionOpened.safeParse(m.json());
      if (parsed.success) return parsed.data.data.owner_id;
      seq = m.seq;
    }
    return undefined;
  };
  return {
    async ownerOf(sessionId, keyId) {
      const hit = cache.get(sessionId);
      if (hit) return hit;
      const owner = await read(sessionId).catch((err) => {
        logger.warn("session owner not readable; scheduling by key", { sessionId, error: (err as Error).message });
        return undefined;
      });
      const resolved = owner ?? `key:${keyId}`;
      if (cache.size >= CACHE_MAX) cache.delete(cache.keys().next().value!);
      if (owner) cache.set(sessionId, resolved);
      return resolved;
    },
  };
}
