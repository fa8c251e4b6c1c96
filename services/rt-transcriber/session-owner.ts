import type { SessionStore } from "../../domain/sessions/store";
import type { Logger } from "../../shared/logger";

/**
 * The owner (tenant) of a realtime session, for fair scheduling, when its utterance
 * command does not carry it (commands from a VAD or gateway before `owner_id` was
 * added): read once per session from its `rt.session.opened` fact on rt.evt.<sessionId>
 * (the sessions store's `readOpened`: direct gets of the first few messages of the
 * subject; the gateway appends it before any audio flows) and cached. A session whose opened fact cannot be read is scheduled
 * as owner `key:<keyId>`, a turn of its own rather than no turn.
 */
export interface SessionOwners {
  ownerOf(sessionId: string, keyId: string): Promise<string>;
}

const CACHE_MAX = 10_000;

export function createSessionOwners(sessions: SessionStore, logger: Logger): SessionOwners {
  const cache = new Map<string, string>();
  const read = async (sessionId: string): Promise<string | undefined> => (await sessions.readOpened(sessionId))?.owner_id;
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
