import { z } from "zod";
import type { Principal } from "../keys/auth";
import { readSignedToken, signToken } from "../keys/signed-token";
import { AppError, unauthorized, validationError } from "../../shared/errors";
import { doorRecord, OPENAI_REALTIME_PATH, type DoorRecord } from "../../schemas/openai-realtime";
import { REALTIME_PATH } from "../../schemas/realtime";

/**
 * Resuming a realtime session after its connection was lost (docs/realtime-resume.md): the
 * credential, who owns a session now, and whether a resume
 * may take it. Pure rules; the gateway's services/realtime-gateway/resume.ts does the
 * I/O (the ownership entry in KV, the replay from rt.evt).
 *
 * The credential is an `rs_` token in the service's one signed-token format
 * (keys/signed-token.ts, as `rt_` tokens and `ek_` secrets): bound to one session, its key and owner, and to a generation `gen` of
 * the session's ownership entry. A resume moves the entry to `gen + 1` with a
 * compare-and-set, so a credential works once and two connections (on one gateway or
 * two) never both take a session: the loser's write fails on the revision.
 */
export const RESUME_CREDENTIAL_PREFIX = "rs_";
/** How long a session whose connection was lost waits for a resume, unless its plan says otherwise. */
export const DEFAULT_RESUME_GRACE_SECONDS = 30;
/** The bound on a plan's grace: a held session keeps a connection slot and the VAD's state. */
export const MAX_RESUME_GRACE_SECONDS = 120;

const resumeClaims = z.object({
  typ: z.literal("resume"),
  sid: z.string().startsWith("sess_"),
  kid: z.string(),
  own: z.string(),
  gen: z.number().int().nonnegative(),
  /** A multichannel session's channel count (one lane each, one replay position each); absent: one lane, the session's own. */
  ch: z.number().int().positive().optional(),
  /** Epoch seconds: the session's longest life plus its grace. */
  exp: z.number().int(),
});
export type ResumeClaims = z.infer<typeof resumeClaims>;

/** Who drives a session now (KV `rt.own.<sessionId>`, bucket `leases`). */
export const sessionOwnership = z.object({
  gen: z.number().int().nonnegative(),
  keyId: z.string(),
  ownerId: z.string(),
  /** The gateway whose connection drives the session; null while it is held. */
  gateway: z.string().nullable(),
  /** The gateway holding it (its grace timer), while held. */
  heldBy: z.string().nullable(),
  /** Epoch ms until which a held session waits for a resume (null while connected). */
  heldUntil: z.number().int().nullable(),
  graceMs: z.number().int().positive(),
  /** Epoch ms of the write (the entry is rewritten before the bucket's max age drops it). */
  at: z.number().int(),
  /**
   * A session opened on the OpenAI door (`/v1/realtime`): the door's state a resume
   * restores (schemas/openai-realtime.ts doorRecord, read by the gateway). Absent: a
   * native session. A session resumes only through the door it was opened on.
   */
  door: z.unknown().optional(),
});
export type SessionOwnership = z.infer<typeof sessionOwnership>;

/** The grace of a plan's sessions (`resumeGraceSeconds`, bounded), in ms. */
export function resumeGraceMs(planGraceSeconds: number | undefined): number {
  const s = planGraceSeconds ?? DEFAULT_RESUME_GRACE_SECONDS;
  return Math.max(1, Math.min(MAX_RESUME_GRACE_SECONDS, s)) * 1000;
}

/** A credential for the session's `gen`-th owner, valid for the session's longest life plus its grace. */
export function issueResumeCredential(
  secret: string | undefined,
  session: { sessionId: string; keyId: string; ownerId: string; gen: number; multichannelChannels?: number },
  validForMs: number,
  now: number,
): string {
  const claims: ResumeClaims = { typ: "resume", sid: session.sessionId, kid: session.keyId, own: session.ownerId, gen: session.gen, exp: Math.ceil((now + validForMs) / 1000) };
  if (session.multichannelChannels !== undefined) claims.ch = session.multichannelChannels;
  return signToken(secret, RESUME_CREDENTIAL_PREFIX, claims);
}

const invalidCredential = () => unauthorized("invalid_resume_credential", "Invalid resume credential.");
export const resumeExpired = () =>
  new AppError("not_found", "resume_expired", "The session can no longer be resumed: its grace period has passed (or it was closed). Open a new session.", { status: 410 });

/** The claims of a resume credential: 401 invalid_resume_credential unless this service signed it; 410 resume_expired past its expiry. */
export function readResumeCredential(secret: string | undefined, credential: string, now: number): ResumeClaims {
  const parsed = resumeClaims.safeParse(readSignedToken(secret, RESUME_CREDENTIAL_PREFIX, credential, invalidCredential));
  if (!parsed.success) throw invalidCredential();
  if (parsed.data.exp * 1000 <= now) throw resumeExpired();
  return parsed.data;
}

/**
 * Where the client's replay starts: after the event `lastEventId` names. Stored events
 * carry stable ids (`evt_<hash>`, session-feed.ts); an event the gateway answered itself
 * (session.updated, an error about a frame, session.resumed) carries the stable id of
 * the last stored event before it and a suffix (`evt_<hash>.<n>`), or `evt_0.<n>` before
 * any; absent, the replay starts at the session's first event.
 */
export function replayPosition(lastEventId: string | null): { kind: "start" } | { kind: "after"; eventId: string } {
  if (lastEventId === null || lastEventId === "") return { kind: "start" };
  const stable = lastEventId.split(".")[0]!;
  if (!/^evt_[0-9a-f]{1,64}$/.test(stable)) throw validationError("resume_event_unknown", "last_event_id is not an event id of this service.", { param: "last_event_id" });
  return stable === "evt_0" ? { kind: "start" } : { kind: "after", eventId: stable };
}

export type ReplayPosition = ReturnType<typeof replayPosition>;

/**
 * The replay positions of a resume, one per lane: a one-lane session's is `lastEventId`
 * as replayPosition reads it; a multichannel session (`channels`, the credential's `ch`)
 * names one position per channel, comma-separated in channel order
 * (`evt_…,evt_…`; `evt_0` or empty for a channel that had no event yet). Each lane's
 * events are its own stream, so one id cannot name where all of them stand. Absent, every
 * lane replays from its first event. A list of another length is refused like an id
 * that is not one.
 */
export function replayPositions(lastEventId: string | null, channels: number | undefined): ReplayPosition[] {
  if (channels === undefined) return [replayPosition(lastEventId)];
  if (lastEventId === null || lastEventId === "") return Array.from({ length: channels }, () => ({ kind: "start" }));
  const ids = lastEventId.split(",");
  if (ids.length !== channels) {
    throw validationError("resume_event_unknown", `last_event_id names ${ids.length} position${ids.length === 1 ? "" : "s"}; this session has ${channels} channels: one event id per channel, comma-separated.`, {
      param: "last_event_id",
    });
  }
  return ids.map((id) => replayPosition(id.trim()));
}

/** What a resume does, given the credential, who asks, and the session's entry as read. */
export type ResumeVerdict =
  /** Take the session (write `next` at the read revision). */
  | { kind: "take"; next: SessionOwnership }
  /** A gateway still drives the session: ask it to let go first (it may be gone: then take). */
  | { kind: "ask_gateway"; gateway: string }
  | { kind: "refuse"; error: AppError };

/**
 * The resume rules: the credential's owner must be the caller's, the key the session was
 * opened (or last resumed) with must not be revoked, the session must exist
 * and still be resumable, and the credential must be the newest (its `gen` the entry's).
 * `gatewayGone` says the gateway the entry names has let go (or is dead).
 */
export function decideResume(
  claims: ResumeClaims,
  principal: Pick<Principal, "keyId" | "ownerId">,
  entry: SessionOwnership | undefined,
  ctx: { now: number; gateway: string; gatewayGone: boolean; revoked: (keyId: string) => boolean },
): ResumeVerdict {
  if (principal.ownerId !== claims.own) {
    return { kind: "refuse", error: new AppError("forbidden", "resume_forbidden", "This resume credential belongs to another owner's session.") };
  }
  // a revoked key's session ends for good: no key, of its owner or any, resumes it
  if (ctx.revoked(claims.kid) || (entry && ctx.revoked(entry.keyId))) {
    return { kind: "refuse", error: new AppError("forbidden", "resume_forbidden", "The key this session was opened with has been revoked: the session has ended and cannot be resumed.", { retryable: false }) };
  }
  if (!entry) return { kind: "refuse", error: resumeExpired() };
  if (entry.gen !== claims.gen) {
    return { kind: "refuse", error: new AppError("conflict", "session_resumed_elsewhere", "This resume credential was already used: the session was resumed by another connection. Use the credential of the latest session.created or session.resumed.", { retryable: false }) };
  }
  if (entry.gateway === null && entry.heldUntil !== null && entry.heldUntil <= ctx.now) return { kind: "refuse", error: resumeExpired() };
  if (entry.gateway !== null && entry.gateway !== ctx.gateway && !ctx.gatewayGone) return { kind: "ask_gateway", gateway: entry.gateway };
  return { kind: "take", next: { ...entry, gen: entry.gen + 1, gateway: ctx.gateway, heldBy: null, heldUntil: null, at: ctx.now } };
}

/**
 * The door state a resume through `door` restores from the session's ownership entry
 * (its `door` field; undefined for a native session). A session resumes only through
 * the door it was opened on: 409 resume_wrong_door otherwise; a door state that does not
 * parse (garbage in KV) is read as lost: 410 resume_state_lost.
 */
export function restoredDoor(stored: unknown, door: "native" | "openai"): DoorRecord | undefined {
  const openedOn = stored === undefined ? "native" : "openai";
  if (openedOn !== door) {
    const path = openedOn === "native" ? REALTIME_PATH : OPENAI_REALTIME_PATH;
    throw new AppError("conflict", "resume_wrong_door", `This session was opened on ${path}: resume it there, with the same protocol.`, { retryable: false, param: "resume" });
  }
  if (door === "native") return undefined;
  const parsed = doorRecord.safeParse(stored);
  if (!parsed.success) {
    throw new AppError("not_found", "resume_state_lost", "The session's OpenAI door state could not be read, so it cannot be resumed. Open a new session.", { status: 410 });
  }
  return parsed.data;
}
