import { randomUUID } from "node:crypto";
import type { KV } from "@nats-io/kv";
import type { Subscription } from "@nats-io/transport-node";
import { CLOSE } from "../../schemas/realtime";
import type { DoorRecord } from "../../schemas/openai-realtime";
import {
  decideResume,
  issueResumeCredential,
  readResumeCredential,
  replayPositions,
  resumeExpired,
  resumeGraceMs,
  sessionOwnership,
  type SessionOwnership,
} from "../../domain/sessions/resume";
import type { SessionStore } from "../../domain/sessions/store";
import { AppError, validationError } from "../../shared/errors";
import { isCasConflict } from "../../shared/lease-entry";
import type { Logger } from "../../shared/logger";
import { consumeRate } from "../../shared/rate-limit";
import { authenticateUpgrade, type Admission, type AdmitDeps, type UpgradeRequest } from "./admit";
import type { Leases } from "./leases";
import type { Session } from "./session";
import { heldFirstSeq, partitionOf, type ResumeOffer, type SessionStart } from "./session-io";
import type { AudioBatcher } from "./audio-publisher";
import { heldEnd } from "./session-lifecycle";
import { laneIdsOf } from "./session-channels";
import { safeJson } from "../../shared/json";
import { holdsEvent, readVadSettings, sessionIdIn, type ResumeRequest } from "./resume-reads";
import { doorPosition, restoredDoor, type DoorPosition } from "./openai-resume";

/**
 * Resuming realtime sessions on this gateway (docs/realtime.md, "Resuming a session";
 * the rules are domain/sessions/resume.ts):
 *
 * - every session has an ownership entry `rt.own.<sessionId>` (bucket `leases`): its
 *   generation, the gateway whose connection drives it, or until when it is held;
 * - a connection lost without a close frame (1006) holds its session: the connection
 *   lease stays, the VAD keeps the session's state, the transcripts of committed items
 *   wait in rt.evt; a timer ends the session when the grace passes untaken;
 * - a resume (`?resume=rs_…&last_event_id=…` on the upgrade) authenticates like any
 *   upgrade, checks the credential and the position, takes the entry with a
 *   compare-and-set (gen + 1), and opens the session in resume mode (session.ts): a
 *   resume control to the VAD, whose answer says where the audio timeline stands, then
 *   the stored events after the position (session-feed.ts), then live ones;
 * - a session still driven by another gateway is asked to let go (core request
 *   `rt.gw.<id>.yield`); a gateway that does not answer is gone (crashed, killed) and the
 *   session is taken from it. A resume of a session driven on this gateway closes the
 *   old connection 4409 session_taken_over: a half-open connection must not keep a
 *   client out of its own session.
 *
 * Caveat: a session whose gateway died and that nobody resumes is not ended by anyone
 * (no rt.session.closed, as before resumes existed); its lease and ownership entry
 * expire (lease TTL, the bucket's 10 min), the VAD drops its state after 10 min idle.
 */
export interface ResumeDeps extends AdmitDeps {
  kv: KV;
  sessions: SessionStore;
  gatewayId: string;
  /** The sessions connected to this gateway. */
  open: Set<Session>;
  /** For ending a session that no connection drives (given back, below). */
  audio: AudioBatcher;
  partitions: number;
}

/** An admitted resume; `door`: through the OpenAI door, its state and the client's position (openai-door.ts DoorStart). */
export interface ResumeAdmitted {
  admission: Admission;
  start: SessionStart;
  door?: { record: DoorRecord; resumedAt: DoorPosition };
}

const ownKey = (sessionId: string) => `rt.own.${sessionId}`;
/** Rewritten before the `leases` bucket's max age (10 min) would drop a long session's entry. */
const REFRESH_AFTER_MS = 4 * 60_000;
const YIELD_TIMEOUT_MS = 2_000;

interface HeldHere {
  gen: number;
  keyId: string;
  timer: NodeJS.Timeout;
  end(reason: string): Promise<void>;
}

export function createResumes(deps: ResumeDeps, leases: Leases, log: Logger) {
  const { kv, nats, config } = deps;
  const secret = config.auth.sessionTokenSecret;
  const now = () => deps.now().getTime();
  /** Sessions held by this gateway, waiting for a resume. */
  const held = new Map<string, HeldHere>();
  const connected = (sessionId: string) => [...deps.open].find((s) => s.id === sessionId && !s.closeReason);
  /** A resume takes a session connected here: it is held first (the hold marks it detached), then its connection closes 4409. */
  const takeOver = (session: Session) => {
    const holding = hold(session, CLOSE.sessionTakenOver.code);
    session.takenOver();
    return holding;
  };
  /** Holds under way (the session's audio being settled, its entry written). */
  const inProgress = new Map<string, Promise<void>>();
  /** The OpenAI door's state being written into a session's entry (doorChanged), in order. */
  const doorWrites = new Map<string, Promise<void>>();
  /** Sessions driven here: when their entry was last written. */
  const written = new Map<string, { at: number; entry: SessionOwnership }>();

  const read = async (sessionId: string): Promise<{ entry: SessionOwnership | undefined; revision: number }> => {
    const e = await kv.get(ownKey(sessionId));
    if (!e || e.operation !== "PUT" || e.length === 0) return { entry: undefined, revision: e?.revision ?? 0 };
    const parsed = sessionOwnership.safeParse(safeJson(e.string()));
    return { entry: parsed.success ? parsed.data : undefined, revision: e.revision };
  };
  const write = async (sessionId: string, entry: SessionOwnership, revision: number | null) => {
    const value = JSON.stringify(entry);
    const rev = revision === null ? await kv.create(ownKey(sessionId), value) : await kv.update(ownKey(sessionId), value, revision);
    written.set(sessionId, { at: entry.at, entry });
    return rev;
  };

  const offerFor =
    (a: Admission) =>
    (gen: number): ResumeOffer | undefined => {
      if (!secret) return undefined;
      const graceMs = resumeGraceMs(a.limits.resumeGraceSeconds);
      // a multichannel session's credential says its channels: its resume names one position per channel (its lanes)
      const session = { sessionId: a.sessionId, keyId: a.principal.keyId, ownerId: a.principal.ownerId, gen, multichannelChannels: a.multichannel ? a.channels : undefined };
      const credential = issueResumeCredential(secret, session, a.limits.maxSessionSeconds * 1000 + graceMs, now());
      return { credential, grace_seconds: graceMs / 1000 };
    };

  /** Ends a held session whose grace passed, unless it was taken meanwhile (then only its lease is let go). */
  const expire = async (sessionId: string, reason = "resume_grace_expired") => {
    const h = held.get(sessionId);
    if (!h) return;
    held.delete(sessionId);
    const { entry, revision } = await read(sessionId).catch(() => ({ entry: undefined, revision: 0 }));
    if (entry && (entry.gen !== h.gen || entry.gateway !== null)) return leases.forget(sessionId);
    if (entry) await kv.delete(ownKey(sessionId), { previousSeq: revision }).catch(() => undefined);
    written.delete(sessionId);
    await h.end(reason);
    await leases.release(h.keyId, sessionId).catch(() => undefined);
  };

  /** A resume on another gateway took a session held here: stop its timer and its lease renewal. */
  const letGo = (sessionId: string) => {
    const h = held.get(sessionId);
    if (!h) return;
    clearTimeout(h.timer);
    held.delete(sessionId);
    written.delete(sessionId);
    leases.forget(sessionId);
  };

  const subs: Subscription[] = [
    nats.nc.subscribe(nats.topology.subjects.rtGateway(deps.gatewayId, "yield"), {
      callback: (err, msg) => {
        if (err) return;
        const sessionId = sessionIdIn(msg.string());
        const s = connected(sessionId);
        const holding = inProgress.get(sessionId);
        if (!s && holding) {
          const answer = () => msg.respond(JSON.stringify({ held: true }));
          return void holding.then(answer, answer);
        }
        if (!s) return void msg.respond(JSON.stringify({ held: false }));
        void takeOver(s).then(
          () => msg.respond(JSON.stringify({ held: true })),
          () => msg.respond(JSON.stringify({ held: false })),
        );
      },
    }),
    nats.nc.subscribe(nats.topology.subjects.rtGateway(deps.gatewayId, "taken"), {
      callback: (err, msg) => {
        if (!err) letGo(sessionIdIn(msg.string()));
      },
    }),
  ];

  const refresh = setInterval(() => {
    for (const [sessionId, w] of written) {
      if (now() - w.at < REFRESH_AFTER_MS || held.has(sessionId)) continue;
      void read(sessionId)
        .then(async ({ entry, revision }) => {
          if (entry && entry.gen === w.entry.gen && entry.gateway === deps.gatewayId) await write(sessionId, { ...entry, at: now() }, revision);
          else written.delete(sessionId);
        })
        .catch(() => undefined);
    }
  }, 60_000);
  refresh.unref();

  /** The session's connection is gone: hold it for its grace (its lease stays taken), unless it was taken meanwhile. */
  function hold(session: Session, code: number): Promise<void> {
    const holding = holdOnce(session, code).finally(() => inProgress.delete(session.id));
    inProgress.set(session.id, holding);
    return holding;
  }
  async function holdOnce(session: Session, code: number): Promise<void> {
    const handle = await session.hold(code);
    const sessionId = session.id;
    await doorWrites.get(sessionId); // the door's last accepted update goes with the held session
    const keyId = session.keyId;
    for (let attempt = 0; attempt < 5; attempt++) {
      const current = await read(sessionId).catch(() => null);
      if (current?.entry && (current.entry.gen !== session.gen || current.entry.gateway !== deps.gatewayId)) {
        // resumed meanwhile: by another gateway (which renews the lease now), or here
        if (current.entry.gateway !== deps.gatewayId) leases.forget(sessionId);
        return;
      }
      if (!current?.entry) break; // never resumable (no entry written): it ends as before
      const next = { ...current.entry, gateway: null, heldBy: deps.gatewayId, heldUntil: now() + current.entry.graceMs, at: now() };
      const ok = await write(sessionId, next, current.revision).then(
        () => true,
        () => false,
      );
      if (!ok) continue;
      const timer = setTimeout(() => void expire(sessionId).catch((err) => log.warn("ending a held session failed", { sessionId, error: (err as Error).message })), next.graceMs);
      timer.unref();
      held.set(sessionId, { gen: next.gen, keyId, timer, end: handle.end });
      log.info("session held for a resume", { sessionId, graceMs: next.graceMs });
      return;
    }
    written.delete(sessionId);
    await handle.end("connection_lost");
    await leases.release(keyId, sessionId).catch(() => undefined);
  }

  /**
   * A resume took the session but no connection came of it (refused after the take, or
   * the upgrade aborted): the session is held again under the generation before, so
   * the credential the client still has works for its next try.
   */
  async function giveBack(sessionId: string, gen: number, keyId: string, multichannelChannels: number | undefined): Promise<void> {
    const current = await read(sessionId);
    if (!current.entry || current.entry.gen !== gen || current.entry.gateway !== deps.gatewayId) return;
    const next = { ...current.entry, gen: gen - 1, gateway: null, heldBy: deps.gatewayId, heldUntil: now() + current.entry.graceMs, at: now() };
    await write(sessionId, next, current.revision);
    const lanes = laneIdsOf(sessionId, multichannelChannels).map((id) => ({ id, partition: partitionOf(id, deps.partitions) }));
    const ending = { session_id: sessionId, code: 1006, audio_ms: 0, startedAt: now(), lanes, firstSeq: heldFirstSeq(gen) };
    const timer = setTimeout(() => void expire(sessionId).catch(() => undefined), next.graceMs);
    timer.unref();
    held.set(sessionId, { gen: next.gen, keyId, timer, end: heldEnd(ending, { audio: deps.audio, sessions: deps.sessions, now }, log) });
  }

  /** Takes the session for a resume, or throws the refusal (see domain/sessions/resume.ts decideResume). */
  const take = async (req: ResumeRequest, principal: Admission["principal"]): Promise<SessionOwnership> => {
    const claims = readResumeCredential(secret, req.credential, now());
    let gatewayGone = false;
    for (let attempt = 0; attempt < 4; attempt++) {
      const { entry, revision } = await read(claims.sid);
      const verdict = decideResume(claims, principal, entry, { now: now(), gateway: deps.gatewayId, gatewayGone, revoked: (keyId) => deps.keyCache.isRevoked(keyId) });
      if (verdict.kind === "refuse") throw verdict.error;
      // judged first: a spent or foreign credential must not end the connection that drives the session
      if (entry?.gateway === deps.gatewayId) {
        // driven here: end that connection and hold the session first
        const local = connected(claims.sid);
        const holding = inProgress.get(claims.sid);
        if (local || holding) {
          await (local ? takeOver(local) : holding);
          continue;
        }
      }
      if (verdict.kind === "ask_gateway") {
        const answer = await nats.nc
          .request(nats.topology.subjects.rtGateway(verdict.gateway, "yield"), JSON.stringify({ session_id: claims.sid }), { timeout: YIELD_TIMEOUT_MS })
          .then((m) => (m.json() as { held?: boolean }).held === true)
          .catch(() => false);
        // no answer (no responders, timeout): that gateway is gone; "not here": nothing drives the session there either
        gatewayGone = !answer;
        continue;
      }
      const previous = entry!;
      try {
        await write(claims.sid, verdict.next, revision);
      } catch (err) {
        if (!isCasConflict(err)) throw err;
        throw new AppError("conflict", "session_resumed_elsewhere", "Another connection resumed this session at the same moment.", { retryable: false });
      }
      if (held.has(claims.sid)) letGo(claims.sid);
      else if (previous.heldBy && previous.heldBy !== deps.gatewayId) nats.nc.publish(nats.topology.subjects.rtGateway(previous.heldBy, "taken"), JSON.stringify({ session_id: claims.sid }));
      return verdict.next;
    }
    throw new AppError("conflict", "session_resumed_elsewhere", "The session is driven by another connection that did not let go; retry shortly.");
  };

  return {
    offerFor,

    /** A new session's ownership entry (gen 0; with `door`, the OpenAI door's state), written before its session.created reaches the client. */
    async opened(a: Admission, door?: DoorRecord): Promise<void> {
      if (!secret) return;
      const entry = { gen: 0, keyId: a.principal.keyId, ownerId: a.principal.ownerId, gateway: deps.gatewayId, heldBy: null, heldUntil: null, graceMs: resumeGraceMs(a.limits.resumeGraceSeconds), at: now() };
      await write(a.sessionId, door ? { ...entry, door } : entry, null).catch(
        (err) => log.warn("could not write the session's ownership entry (it cannot be resumed)", { sessionId: a.sessionId, error: (err as Error).message }),
      );
    },

    /** The OpenAI door accepted an update: its state goes into the session's entry (while driven here), after the writes before it. */
    doorChanged(sessionId: string, door: DoorRecord): void {
      const change = async () => {
        for (let attempt = 0; attempt < 4; attempt++) {
          const { entry, revision } = await read(sessionId);
          if (!entry || entry.gateway !== deps.gatewayId) return;
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
    closed(sessionId: string): void {
      const w = written.get(sessionId);
      written.delete(sessionId);
      if (!w || held.has(sessionId)) return;
      void read(sessionId)
        .then(({ entry, revision }) => (entry && entry.gen === w.entry.gen && entry.gateway === deps.gatewayId ? kv.delete(ownKey(sessionId), { previousSeq: revision }) : undefined))
        .catch(() => undefined);
    },

    /** The session's connection is gone: hold it for its grace (its lease stays taken). */
    hold,

    /**
     * A resume's admission: authentication as for any upgrade, the credential, the
     * position, the connection quota; then the session is taken. Returns the admission
     * and the start (resume mode) for openSession; through the OpenAI door, also the
     * door's stored state and the position its `last_event_id` named (openai-resume.ts).
     */
    async admit(req: UpgradeRequest, resume: ResumeRequest, door: "native" | "openai" = "native"): Promise<ResumeAdmitted> {
      if (!config.gateway.enabled || deps.flag.disabled()) {
        throw new AppError("unavailable", "gateway_disabled", "The realtime gateway is disabled by the operator; retry later or use the segment endpoint.");
      }
      const at = deps.now();
      const principal = await authenticateUpgrade(deps, req, at);
      const claims = readResumeCredential(secret, resume.credential, now());
      // the OpenAI door's sessions are mono: one position, in the door's event ids (openai-resume.ts)
      const doorAt = door === "openai" ? doorPosition(resume.lastEventId) : null;
      const positions = doorAt ? [doorAt.eventId ? { kind: "after" as const, eventId: doorAt.eventId } : { kind: "start" as const }] : replayPositions(resume.lastEventId, claims.ch);
      const lanes = laneIdsOf(claims.sid, claims.ch);
      const opened = await deps.sessions.readOpened(claims.sid);
      if (!opened) throw resumeExpired();
      // the door the session was opened on, before the credential is spent (a session's door never changes)
      const record = restoredDoor((await read(claims.sid)).entry?.door, door);
      for (const [i, position] of positions.entries()) {
        if (position.kind === "after" && !(await holdsEvent(nats, lanes[i]!, position.eventId))) {
          const which = claims.ch === undefined ? "" : ` (channel ${i}: ${position.eventId})`;
          throw validationError("resume_event_unknown", `last_event_id ${resume.lastEventId}${which} is not an event of this session.`, { param: "last_event_id" });
        }
      }
      const limits = deps.limitsFor(principal);
      await consumeRate(nats, principal.keyId, "connections", limits.maxConnectionsPerMinute, at);
      const taken = await take(resume, principal);
      let left: number, budget: Admission["budget"], settings: Awaited<ReturnType<typeof readVadSettings>>;
      try {
        await leases.acquire(principal.keyId, claims.sid, limits.maxConcurrentConnections);
        budget = deps.usage.budget({ keyId: principal.keyId, limits }, at);
        left = await budget.remaining();
        settings = await readVadSettings(kv, lanes[0]!);
      } catch (err) {
        await giveBack(claims.sid, taken.gen, principal.keyId, claims.ch).catch(() => undefined);
        throw err;
      }
      const admission: Admission = {
        sessionId: claims.sid,
        requestId: randomUUID(),
        principal,
        limits,
        sampleRate: opened.sample_rate,
        channels: opened.channels,
        multichannel: claims.ch !== undefined,
        remainingAudioSeconds: Number.isFinite(left) ? Math.floor(left) : limits.maxAudioSecondsPerSession,
        budget,
        ...(settings ?? { language: null, prompt: null }),
      };
      const afterEventIds = positions.map((p) => (p.kind === "after" ? p.eventId : null));
      const start: SessionStart = { kind: "resume", gen: taken.gen, afterEventIds, offer: offerFor(admission) };
      return { admission, start, ...(record && doorAt ? { door: { record, resumedAt: doorAt } } : {}) };
    },

    /** An admitted upgrade that did not become a connection (aborted, or the upgrade failed): its lease and its session go back. */
    async abandoned(admission: Admission, start: SessionStart | undefined): Promise<void> {
      if (start?.kind === "resume") return giveBack(admission.sessionId, start.gen, admission.principal.keyId, admission.multichannel ? admission.channels : undefined);
      this.closed(admission.sessionId);
      await leases.release(admission.principal.keyId, admission.sessionId);
    },

    /** A key was revoked: its sessions held here end now (no resume can take them). */
    revoked: (keyId: string) => [...held].filter(([, h]) => h.keyId === keyId).forEach(([sid]) => void expire(sid, "key_revoked").catch(() => undefined)),
    /** The holds under way, settled (the gateway's stop waits for them). */
    holding: () => Promise.all([...inProgress.values()].map((h) => h.catch(() => undefined))).then(() => undefined),
    /** Sessions held here now. */
    heldCount: () => held.size,
    stop() {
      clearInterval(refresh);
      for (const s of subs) s.unsubscribe();
      for (const h of held.values()) clearTimeout(h.timer);
    },
  };
}
