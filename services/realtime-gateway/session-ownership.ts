import type { KV } from "@nats-io/kv";
import type { DoorRecord } from "../../schemas/openai-realtime";
import { resumeGraceMs, sessionOwnership, type SessionOwnership } from "../../domain/sessions/resume";
import { isCasConflict } from "../../shared/lease-entry";
import type { Logger } from "../../shared/logger";
import { safeJson } from "../../shared/json";
import type { Admission } from "./admit";

/**
 * Each resumable session's ownership entry `rt.own.<sessionId>` (bucket `leases`; the
 * rules are domain/sessions/resume.ts): written when the session opens, with the OpenAI
 * door's state as it changes, rewritten before the bucket's max age would drop a long
 * session's entry, and removed when the session ends here. Every write is a
 * compare-and-set on the revision read (`write`), so a resume on another gateway and
 * this one never both win.
 */
export type Ownership = ReturnType<typeof createOwnership>;

const ownKey = (sessionId: string) => `rt.own.${sessionId}`;
/** Rewritten before the `leases` bucket's max age (10 min) would drop a long session's entry. */
const REFRESH_AFTER_MS = 4 * 60_000;

export function createOwnership(kv: KV, gatewayId: string, now: () => number, log: Logger) {
  /** Sessions driven here: when their entry was last written. */
  const written = new Map<string, { at: number; entry: SessionOwnership }>();
  /** The OpenAI door's state being written into a session's entry (doorChanged), in order. */
  const doorWrites = new Map<string, Promise<void>>();

  const read = async (sessionId: string): Promise<{ entry: SessionOwnership | undefined; revision: number }> => {
    const e = await kv.get(ownKey(sessionId));
    if (!e || e.operation !== "PUT" || e.length === 0) return { entry: undefined, revision: e?.revision ?? 0 };
    const parsed = sessionOwnership.safeParse(safeJson(e.string()));
    return { entry: parsed.success ? parsed.data : undefined, revision: e.revision };
  };
  /** Writes the entry at `revision` (null: creates it); throws on a lost compare-and-set. */
  const write = async (sessionId: string, entry: SessionOwnership, revision: number | null) => {
    const value = JSON.stringify(entry);
    const rev = revision === null ? await kv.create(ownKey(sessionId), value) : await kv.update(ownKey(sessionId), value, revision);
    written.set(sessionId, { at: entry.at, entry });
    return rev;
  };
  const remove = (sessionId: string, revision: number) => kv.delete(ownKey(sessionId), { previousSeq: revision });

  /** Keeps the entries of sessions driven here (not `held`) younger than the bucket's max age. */
  const refresh = (held: (sessionId: string) => boolean) => {
    for (const [sessionId, w] of written) {
      if (now() - w.at < REFRESH_AFTER_MS || held(sessionId)) continue;
      void read(sessionId)
        .then(async ({ entry, revision }) => {
          if (entry && entry.gen === w.entry.gen && entry.gateway === gatewayId) await write(sessionId, { ...entry, at: now() }, revision);
          else written.delete(sessionId);
        })
        .catch(() => undefined);
    }
  };

  return {
    read,
    write,
    remove,
    refresh,
    /** This gateway no longer writes the session's entry. */
    forget: (sessionId: string) => void written.delete(sessionId),
    /** The door's last accepted update, written (a held session takes it along). */
    doorWritten: (sessionId: string) => doorWrites.get(sessionId),

    /** A new session's entry (gen 0; with `door`, the OpenAI door's state), written before its session.created reaches the client. */
    async opened(a: Admission, door?: DoorRecord): Promise<void> {
      const entry = { gen: 0, keyId: a.principal.keyId, ownerId: a.principal.ownerId, gateway: gatewayId, heldBy: null, heldUntil: null, graceMs: resumeGraceMs(a.limits.resumeGraceSeconds), at: now() };
      await write(a.sessionId, door ? { ...entry, door } : entry, null).catch(
        (err) => log.warn("could not write the session's ownership entry (it cannot be resumed)", { sessionId: a.sessionId, error: (err as Error).message }),
      );
    },

    /** The OpenAI door accepted an update: its state goes into the session's entry (while driven here), after the writes before it. */
    doorChanged(sessionId: string, door: DoorRecord): void {
      const change = async () => {
        for (let attempt = 0; attempt < 4; attempt++) {
          const { entry, revision } = await read(sessionId);
          if (!entry || entry.gateway !== gatewayId) return;
          if (await write(sessionId, { ...entry, door, at: now() }, revision).then(() => true, (err) => (isCasConflict(err) ? false : Promise.reject(err)))) return;
        }
      };
      const writing = (doorWrites.get(sessionId) ?? Promise.resolve())
        .then(change)
        .catch((err) => log.warn("could not store the door's state (a resume restores the one before)", { sessionId, error: (err as Error).message }))
        .finally(() => void (doorWrites.get(sessionId) === writing && doorWrites.delete(sessionId)));
      doorWrites.set(sessionId, writing);
    },

    /** The session ended (not held): its entry goes, if this gateway still owns it. */
    closed(sessionId: string, held: boolean): void {
      const w = written.get(sessionId);
      written.delete(sessionId);
      if (!w || held) return;
      void read(sessionId)
        .then(({ entry, revision }) => (entry && entry.gen === w.entry.gen && entry.gateway === gatewayId ? remove(sessionId, revision) : undefined))
        .catch(() => undefined);
    },
  };
}
