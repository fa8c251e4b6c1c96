import { randomUUID } from "node:crypto";
import type { KV } from "@nats-io/kv";
import type { Msg, Subscription } from "@nats-io/transport-node";
import type { DoorRecord } from "../../schemas/openai-realtime";
import {
  decideResume,
  issueResumeCredential,
  readResumeCredential,
  replayPositions,
  resumeExpired,
  resumeGraceMs,
  restoredDoor,
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
import type { ResumeOffer, SessionStart } from "./session-io";
import { createOwnership, type Ownership } from "./session-ownership";
import { createHolds, type Holds } from "./resume-holds";
import type { AudioBatcher } from "./audio-publisher";
import { laneIdsOf } from "./session-channels";
import { holdsEvent, readVadSettings, sessionIdIn, type ResumeRequest } from "./resume-reads";
import { doorPosition, type DoorPosition } from "./openai-resume";

/**
 * Resuming realtime sessions on this gateway (docs/realtime-resume.md;
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

const YIELD_TIMEOUT_MS = 2_000;

export type Resumes = ReturnType<typeof createResumes>;

export function createResumes(deps: ResumeDeps, leases: Leases, log: Logger) {
  const { kv, nats, config, gatewayId } = deps;
  const secret = config.auth.sessionTokenSecret;
  const now = () => deps.now().getTime();
  const ownership = createOwnership(kv, gatewayId, now, log);
  const holds = createHolds({ ownership, leases, gatewayId, open: deps.open, audio: deps.audio, sessions: deps.sessions, partitions: deps.partitions, now, log });

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

  const respond = (msg: Msg, held: boolean) => msg.respond(JSON.stringify({ held }));
  const subs: Subscription[] = [
    // another gateway's resume asks this one to let go of a session it drives
    nats.nc.subscribe(nats.topology.subjects.rtGateway(gatewayId, "yield"), {
      callback: (err, msg) => {
        if (err) return;
        const sessionId = sessionIdIn(msg.string());
        const s = holds.connected(sessionId);
        const holding = holds.holding(sessionId);
        if (!s && holding) return void holding.then(() => respond(msg, true), () => respond(msg, true));
        if (!s) return void respond(msg, false);
        void holds.takeOver(s).then(() => respond(msg, true), () => respond(msg, false));
      },
    }),
    nats.nc.subscribe(nats.topology.subjects.rtGateway(gatewayId, "taken"), {
      callback: (err, msg) => {
        if (!err) holds.letGo(sessionIdIn(msg.string()));
      },
    }),
  ];
  const refresh = setInterval(() => ownership.refresh(holds.isHeld), 60_000);
  refresh.unref();

  return {
    offerFor,

    /** A new session's ownership entry (gen 0; with `door`, the OpenAI door's state), written before its session.created reaches the client. */
    opened: (a: Admission, door?: DoorRecord): Promise<void> => (secret ? ownership.opened(a, door) : Promise.resolve()),
    /** The OpenAI door accepted an update: its state goes into the session's entry (session-ownership.ts). */
    doorChanged: ownership.doorChanged,
    /** The session ended (not held): its entry goes, if this gateway still owns it. */
    closed: (sessionId: string) => ownership.closed(sessionId, holds.isHeld(sessionId)),
    /** The session's connection is gone: hold it for its grace (its lease stays taken). */
    hold: holds.hold,

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
      const record = restoredDoor((await ownership.read(claims.sid)).entry?.door, door);
      for (const [i, position] of positions.entries()) {
        if (position.kind === "after" && !(await holdsEvent(nats, lanes[i]!, position.eventId))) {
          const which = claims.ch === undefined ? "" : ` (channel ${i}: ${position.eventId})`;
          throw validationError("resume_event_unknown", `last_event_id ${resume.lastEventId}${which} is not an event of this session.`, { param: "last_event_id" });
        }
      }
      const limits = deps.limitsFor(principal);
      await consumeRate(nats, principal.keyId, "connections", limits.maxConnectionsPerMinute, at);
      const taken = await take({ secret, nats, gatewayId, keyCache: deps.keyCache, ownership, holds, now }, resume, principal);
      let left: number, budget: Admission["budget"], settings: Awaited<ReturnType<typeof readVadSettings>>;
      try {
        await leases.acquire(principal.keyId, claims.sid, limits.maxConcurrentConnections);
        budget = deps.usage.budget({ keyId: principal.keyId, limits }, at);
        left = await budget.remaining();
        settings = await readVadSettings(kv, lanes[0]!);
      } catch (err) {
        await holds.giveBack(claims.sid, taken.gen, principal.keyId, claims.ch).catch(() => undefined);
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
      if (start?.kind === "resume") return holds.giveBack(admission.sessionId, start.gen, admission.principal.keyId, admission.multichannel ? admission.channels : undefined);
      this.closed(admission.sessionId);
      await leases.release(admission.principal.keyId, admission.sessionId);
    },

    /** A key was revoked: its sessions held here end now (no resume can take them). */
    revoked: holds.revoked,
    /** The holds under way, settled (the gateway's stop waits for them). */
    holding: holds.allSettled,
    /** Sessions held here now. */
    heldCount: holds.count,
    stop() {
      clearInterval(refresh);
      for (const s of subs) s.unsubscribe();
      holds.stop();
    },
  };
}

/** What taking a session for a resume works with (createResumes). */
interface TakeContext {
secret: string | undefined;
nats: ResumeDeps["nats"];
gatewayId: string;
keyCache: ResumeDeps["keyCache"];
ownership: Ownership;
holds: Holds;
now(): number;
}

/**
 * Takes the session for a resume, or throws the refusal (domain/sessions/resume.ts
 * decideResume): a session driven here is held first (its connection closes 4409), one
 * driven by another gateway is asked to let go (`rt.gw.<id>.yield`; no answer: that
 * gateway is gone), then the entry moves to the next generation with a compare-and-set.
 */
async function take(c: TakeContext, req: ResumeRequest, principal: Admission["principal"]): Promise<SessionOwnership> {
  const { secret, nats, gatewayId, holds, now } = c;
  const { read, write } = c.ownership;
  const claims = readResumeCredential(secret, req.credential, now());
  let gatewayGone = false;
  for (let attempt = 0; attempt < 4; attempt++) {
    const { entry, revision } = await read(claims.sid);
    const verdict = decideResume(claims, principal, entry, { now: now(), gateway: gatewayId, gatewayGone, revoked: (keyId) => c.keyCache.isRevoked(keyId) });
    if (verdict.kind === "refuse") throw verdict.error;
    // judged first: a spent or foreign credential must not end the connection that drives the session
    if (entry?.gateway === gatewayId) {
      // driven here: end that connection and hold the session first
      const local = holds.connected(claims.sid);
      const holding = holds.holding(claims.sid);
      if (local || holding) {
        await (local ? holds.takeOver(local) : holding);
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
    if (holds.isHeld(claims.sid)) holds.letGo(claims.sid);
    else if (previous.heldBy && previous.heldBy !== gatewayId) nats.nc.publish(nats.topology.subjects.rtGateway(previous.heldBy, "taken"), JSON.stringify({ session_id: claims.sid }));
    return verdict.next;
  }
  throw new AppError("conflict", "session_resumed_elsewhere", "The session is driven by another connection that did not let go; retry shortly.");
}
