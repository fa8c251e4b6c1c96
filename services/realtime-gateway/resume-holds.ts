import { CLOSE } from "../../schemas/realtime";
import type { SessionStore } from "../../domain/sessions/store";
import type { Logger } from "../../shared/logger";
import type { AudioBatcher } from "./audio-publisher";
import type { Leases } from "./leases";
import type { Session } from "./session";
import { laneIdsOf } from "./session-channels";
import { heldFirstSeq, partitionOf } from "./session-io";
import { heldEnd } from "./session-lifecycle";
import type { Ownership } from "./session-ownership";

/**
 * The sessions this gateway holds for a resume (resume.ts): a session whose connection
 * was lost (or whose gateway restarts, or that another connection takes over) is held
 * for its grace: its ownership entry says until when, its connection lease stays taken,
 * and a timer ends it (rt.session.closed `resume_grace_expired`) unless a resume takes
 * it first.
 */
export interface HoldDeps {
  ownership: Ownership;
  leases: Leases;
  gatewayId: string;
  /** The sessions connected to this gateway. */
  open: Set<Session>;
  /** For ending a session that no connection drives. */
  audio: AudioBatcher;
  sessions: SessionStore;
  partitions: number;
  now: () => number;
  log: Logger;
}

interface HeldHere {
  gen: number;
  keyId: string;
  timer: NodeJS.Timeout;
  end(reason: string): Promise<void>;
}

export type Holds = ReturnType<typeof createHolds>;

export function createHolds(deps: HoldDeps) {
  const { ownership, leases, gatewayId, now, log } = deps;
  /** Sessions held by this gateway, waiting for a resume. */
  const held = new Map<string, HeldHere>();
  /** Holds under way (the session's audio being settled, its entry written). */
  const inProgress = new Map<string, Promise<void>>();

  const keep = (sessionId: string, h: Omit<HeldHere, "timer">, graceMs: number, onFail: (err: Error) => void) => {
    const timer = setTimeout(() => void expire(sessionId).catch(onFail), graceMs);
    timer.unref();
    held.set(sessionId, { ...h, timer });
  };

  /** Ends a held session whose grace passed, unless it was taken meanwhile (then only its lease is let go). */
  const expire = async (sessionId: string, reason = "resume_grace_expired") => {
    const h = held.get(sessionId);
    if (!h) return;
    held.delete(sessionId);
    const { entry, revision } = await ownership.read(sessionId).catch(() => ({ entry: undefined, revision: 0 }));
    if (entry && (entry.gen !== h.gen || entry.gateway !== null)) return leases.forget(sessionId);
    if (entry) await ownership.remove(sessionId, revision).catch(() => undefined);
    ownership.forget(sessionId);
    await h.end(reason);
    await leases.release(h.keyId, sessionId).catch(() => undefined);
  };

  /** The session's connection is gone: hold it for its grace (its lease stays taken), unless it was taken meanwhile. */
  function hold(session: Session, code: number): Promise<void> {
    const holding = holdOnce(session, code).finally(() => inProgress.delete(session.id));
    inProgress.set(session.id, holding);
    return holding;
  }
  async function holdOnce(session: Session, code: number): Promise<void> {
    const handle = await session.hold(code);
    const sessionId = session.id;
    await ownership.doorWritten(sessionId); // the door's last accepted update goes with the held session
    for (let attempt = 0; attempt < 5; attempt++) {
      const current = await ownership.read(sessionId).catch(() => null);
      if (current?.entry && (current.entry.gen !== session.gen || current.entry.gateway !== gatewayId)) {
        // resumed meanwhile: by another gateway (which renews the lease now), or here
        if (current.entry.gateway !== gatewayId) leases.forget(sessionId);
        return;
      }
      if (!current?.entry) break; // never resumable (no entry written): it ends as before
      const next = { ...current.entry, gateway: null, heldBy: gatewayId, heldUntil: now() + current.entry.graceMs, at: now() };
      if (!(await ownership.write(sessionId, next, current.revision).then(() => true, () => false))) continue;
      keep(sessionId, { gen: next.gen, keyId: session.keyId, end: handle.end }, next.graceMs, (err) => log.warn("ending a held session failed", { sessionId, error: err.message }));
      log.info("session held for a resume", { sessionId, graceMs: next.graceMs });
      return;
    }
    ownership.forget(sessionId);
    await handle.end("connection_lost");
    await leases.release(session.keyId, sessionId).catch(() => undefined);
  }

  /** The session connected here, if its connection has not been closed by the server. */
  const connected = (sessionId: string) => [...deps.open].find((s) => s.id === sessionId && s.connected);

  return {
    hold,
    connected,
    /** A hold of the session under way here. */
    holding: (sessionId: string) => inProgress.get(sessionId),
    /** Every hold under way, settled (the gateway's stop waits for them). */
    allSettled: () => Promise.all([...inProgress.values()].map((h) => h.catch(() => undefined))).then(() => undefined),
    isHeld: (sessionId: string) => held.has(sessionId),
    count: () => held.size,

    /** A resume takes a session connected here: it is held first (the hold marks it detached), then its connection closes 4409. */
    takeOver(session: Session): Promise<void> {
      const holding = hold(session, CLOSE.sessionTakenOver.code);
      session.takenOver();
      return holding;
    },

    /** A resume took a session held here: stop its timer and its lease renewal. */
    letGo(sessionId: string): void {
      const h = held.get(sessionId);
      if (!h) return;
      clearTimeout(h.timer);
      held.delete(sessionId);
      ownership.forget(sessionId);
      leases.forget(sessionId);
    },

    /**
     * A resume took the session but no connection came of it (refused after the take, or
     * the upgrade aborted): the session is held again under the generation before, so
     * the credential the client still has works for its next try.
     */
    async giveBack(sessionId: string, gen: number, keyId: string, multichannelChannels: number | undefined): Promise<void> {
      const current = await ownership.read(sessionId);
      if (!current.entry || current.entry.gen !== gen || current.entry.gateway !== gatewayId) return;
      const next = { ...current.entry, gen: gen - 1, gateway: null, heldBy: gatewayId, heldUntil: now() + current.entry.graceMs, at: now() };
      await ownership.write(sessionId, next, current.revision);
      const lanes = laneIdsOf(sessionId, multichannelChannels).map((id) => ({ id, partition: partitionOf(id, deps.partitions) }));
      const ending = { session_id: sessionId, code: 1006, audio_ms: 0, startedAt: now(), lanes, firstSeq: heldFirstSeq(gen) };
      keep(sessionId, { gen: next.gen, keyId, end: heldEnd(ending, { audio: deps.audio, sessions: deps.sessions, now }, log) }, next.graceMs, () => undefined);
    },

    /** A key was revoked: its sessions held here end now (no resume can take them). */
    revoked: (keyId: string) => [...held].filter(([, h]) => h.keyId === keyId).forEach(([sid]) => void expire(sid, "key_revoked").catch(() => undefined)),

    stop: () => held.forEach((h) => clearTimeout(h.timer)),
  };
}
