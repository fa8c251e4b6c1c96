import { CLOSE, type CloseReason } from "../../schemas/realtime";

/**
 * When a realtime session ends, and with which close code and reason (spec 7.3), as a
 * pure decision: the gateway's session (services/realtime-gateway/session.ts) reports
 * what just happened with the facts the rule needs, and carries the verdict out (ends
 * the socket, drops a frame). No clock, no socket, no NATS in here.
 *
 * | cause | close |
 * |---|---|
 * | a frame over RT_MAX_FRAME_BYTES (text or binary) | 1009 frame_too_large |
 * | a binary frame cut inside a sample | none: the frame is dropped and answered |
 * | the session's audio past the plan's max_audio_seconds_per_session | 1008 session_audio_limit |
 * | the key's audio budget used up (at open, or the audio past what was granted) | 1008 audio_quota_exhausted |
 * | the session open longer than max_session_seconds | 1008 session_duration_limit |
 * | no audio for idle_timeout_seconds | 4408 idle_timeout |
 * | the key revoked | 1008 key_revoked |
 * | the client not reading (a send dropped, or more unsent than RT_MAX_CLIENT_BUFFER_BYTES) | 1013 client_backpressure |
 * | the partition's batches over RT_MAX_PENDING_ACKS for RT_BACKPRESSURE_GRACE_MS while NATS is down | 1013 upstream_unavailable |
 * | the gateway's newest session while the plane is far behind (admission.ts, one per RT_SHED_EVERY_MS) | 1013 upstream_backpressure |
 * | an audio batch that failed | 1013 upstream_unavailable; 1011 client_error when the stream refused it (and NATS is up) |
 * | workers' breaker open, or NATS down for NATS_OUTAGE_CLOSE_MS | 1013 upstream_unavailable |
 * | the gateway stopping | 1013 upstream_unavailable |
 * | a handler that threw | 1011 client_error |
 * | after session.close: flushed and every item answered, or 30 s passed | 1000 |
 */
export interface SessionLimits {
  maxFrameBytes: number;
  maxAudioSecondsPerSession: number;
  maxSessionSeconds: number;
  idleTimeoutSeconds: number;
  maxClientBufferBytes: number;
  backpressureGraceMs: number;
}

/** What the session reports, with the facts its rule reads. Times are ms (epoch or durations). */
export type SessionCheck =
  /** A WebSocket frame arrived, before it is read. `bytesPerFrame`: one sample of every channel. */
  | { kind: "frame_received"; binary: boolean; bytes: number; bytesPerFrame: number }
  /** An audio frame was counted: the session's audio against its limit and the budget granted so far. */
  | { kind: "audio_counted"; audioMs: number; allowanceMs: number; budgetExhausted: boolean }
  /** A claim on the key's audio budget settled. */
  | { kind: "budget_settled"; audioMs: number; allowanceMs: number; budgetExhausted: boolean }
  /** The session opened with this much of the key's audio left in its window. */
  | { kind: "opened"; remainingAudioSeconds: number }
  /** Audio was handed to the partition's publisher: how long the partition has been over its acks in flight. */
  | { kind: "audio_published"; overloadedMs: number; natsHealthy: boolean }
  /** An event was sent: uWS's answer (1 sent, 0 buffered, 2 dropped) and what the socket holds unsent. */
  | { kind: "event_sent"; result: number; bufferedBytes: number }
  /** A batch holding the session's audio failed; `refused`: the stream answered with a client-class error. */
  | { kind: "publish_failed"; refused: boolean; natsHealthy: boolean }
  /** A session event was forwarded; during a graceful close, whether everything has come back. */
  | { kind: "event_forwarded"; closeRequested: boolean; vadFlushed: boolean; pendingItems: number }
  /** The gateway's sweep (every 250 ms). `gracefulDeadline`: set after session.close. */
  | {
      kind: "swept";
      now: number;
      startedAt: number;
      lastAudioAt: number;
      gracefulDeadline: number | null;
      upstreamAvailable: boolean;
      /** When this session first saw the upstream unavailable (null while it is available). */
      upstreamLostAt: number | null;
      /** Committed items whose outcome has not reached the client yet. */
      pendingItems: number;
      bufferedBytes: number;
      overloadedMs: number;
      natsHealthy: boolean;
    };

export type Verdict = { kind: "keep" } | { kind: "close"; reason: CloseReason } | { kind: "drop_frame" };

const keep: Verdict = { kind: "keep" };
const closeWith = (reason: CloseReason): Verdict => ({ kind: "close", reason });

/**
 * How long the gateway's NATS connection may be down before every open session closes
 * 1013 upstream_unavailable: the JetStream publish timeout, so a session with no audio
 * in flight ends when one whose audio is waiting for acks would (those end sooner when
 * their acks pass RT_MAX_PENDING_ACKS, with the same reason). A shorter blip is ridden
 * out: nats.js reconnects every 500 ms and sends what it buffered.
 */
export const NATS_OUTAGE_CLOSE_MS = 10_000;

export function decideClose(check: SessionCheck, limits: SessionLimits): Verdict {
  switch (check.kind) {
    case "frame_received":
      if (check.bytes > limits.maxFrameBytes) return closeWith(CLOSE.frameTooLarge);
      // A frame cut inside a sample would shift every later sample by a byte (noise the
      // VAD never hears as speech): it is dropped whole, and the next well-formed frame
      // carries on where the last accepted one ended.
      if (check.binary && check.bytes % check.bytesPerFrame !== 0) return { kind: "drop_frame" };
      return keep;
    case "audio_counted":
      if (check.audioMs > limits.maxAudioSecondsPerSession * 1000) return closeWith(CLOSE.sessionAudioLimit);
      return budgetVerdict(check);
    case "budget_settled":
      return budgetVerdict(check);
    case "opened":
      return check.remainingAudioSeconds <= 0 ? closeWith(CLOSE.audioQuotaExhausted) : keep;
    case "audio_published":
      return backpressureVerdict(check, limits);
    case "event_sent":
      return check.result === 2 || check.bufferedBytes > limits.maxClientBufferBytes ? closeWith(CLOSE.clientBackpressure) : keep;
    case "publish_failed":
      return closeWith(upstreamCloseReason(check.refused ? "publish_refused" : "publish_failed", check.natsHealthy));
    case "event_forwarded":
      return check.closeRequested && check.vadFlushed && check.pendingItems === 0 ? closeWith(CLOSE.normal) : keep;
    case "swept":
      return sweepVerdict(check, limits);
    default: {
      const never: never = check;
      return never;
    }
  }
}

/** Causes that close a session at once, whatever its state. */
export type CloseCause = "key_revoked" | "gateway_stopping" | "gateway_restarting" | "handler_failed" | "load_shed" | "taken_over" | "resume_failed";

export function closeFor(cause: CloseCause): CloseReason {
  switch (cause) {
    case "key_revoked":
      return CLOSE.keyRevoked;
    case "gateway_stopping":
      // try again elsewhere
      return CLOSE.upstreamUnavailable;
    case "gateway_restarting":
      // a session that can be resumed is held when its gateway stops (resume.ts)
      return CLOSE.gatewayRestarting;
    case "handler_failed":
      return CLOSE.clientError;
    case "load_shed":
      // the gateway's newest session, while the plane is far behind (admission.ts)
      return CLOSE.upstreamBackpressure;
    case "taken_over":
      // another connection resumed the session with its credential (resume.ts)
      return CLOSE.sessionTakenOver;
    case "resume_failed":
      // the VAD did not answer the resume in time: try again
      return CLOSE.upstreamUnavailable;
    default: {
      const never: never = cause;
      return never;
    }
  }
}

/** A partial grant means the window is used up: the session closes once its audio passes what was granted. */
function budgetVerdict(check: { audioMs: number; allowanceMs: number; budgetExhausted: boolean }): Verdict {
  return check.budgetExhausted && check.audioMs > check.allowanceMs ? closeWith(CLOSE.audioQuotaExhausted) : keep;
}

/** The sweep's rules, first match wins; while a graceful close waits, only its deadline counts. */
function sweepVerdict(check: Extract<SessionCheck, { kind: "swept" }>, limits: SessionLimits): Verdict {
  if (check.gracefulDeadline !== null) return check.now >= check.gracefulDeadline ? closeWith(CLOSE.normal) : keep;
  if (!check.upstreamAvailable) return outcomesOwed(check) ? keep : closeWith(CLOSE.upstreamUnavailable);
  if (check.now - check.startedAt > limits.maxSessionSeconds * 1000) return closeWith(CLOSE.sessionDurationLimit);
  if (check.now - check.lastAudioAt > limits.idleTimeoutSeconds * 1000) return closeWith(CLOSE.idleTimeout);
  if (check.bufferedBytes > limits.maxClientBufferBytes) return closeWith(CLOSE.clientBackpressure);
  return backpressureVerdict(check, limits);
}

/**
 * How long a session whose upstream is gone stays open for the outcomes of items it
 * committed before: the `failed` of the utterance whose failures opened the breaker
 * travels the event stream, and closing at once lost it under load (the client saw 1013
 * and never heard of its last item).
 */
export const OUTCOME_GRACE_MS = 2_000;

function outcomesOwed(check: { pendingItems: number; upstreamLostAt: number | null; now: number }): boolean {
  return check.pendingItems > 0 && check.upstreamLostAt !== null && check.now - check.upstreamLostAt < OUTCOME_GRACE_MS;
}

/**
 * Audio acks piling up past the grace: while NATS is down that is the outage, and the
 * session closes 1013 upstream_unavailable. With NATS up, JetStream is slow, and that
 * is no reason to close this session: the gateway gives back its newest sessions one
 * at a time instead (admission.ts `decideShed`, close cause `load_shed`), so a plane
 * past capacity never closes every session at once. A stream that stops acking
 * altogether fails the publishes after their timeout, which closes their sessions.
 */
function backpressureVerdict(check: { overloadedMs: number; natsHealthy: boolean }, limits: SessionLimits): Verdict {
  return check.overloadedMs > limits.backpressureGraceMs && !check.natsHealthy ? closeWith(CLOSE.upstreamUnavailable) : keep;
}

/**
 * One NATS outage, one close: while the gateway's NATS connection is down (or still
 * re-declaring after a reconnect), acks that stop draining and publishes that fail are
 * the outage itself, so they close 1013 upstream_unavailable like the gateway's sweep
 * does for every session once the outage has lasted NATS_OUTAGE_CLOSE_MS; with NATS
 * up they keep their own reasons (client_error: the stream refused the audio; JetStream
 * merely slow closes nothing here: `backpressureVerdict`).
 */
export function upstreamCloseReason(cause: "publish_failed" | "publish_refused", natsHealthy: boolean): CloseReason {
  if (!natsHealthy) return CLOSE.upstreamUnavailable;
  return cause === "publish_refused" ? CLOSE.clientError : CLOSE.upstreamUnavailable;
}

/**
 * Whether open sessions may go on, judged by the gateway's sweep for all of them.
 * Mid-session only an open breaker or a NATS outage past NATS_OUTAGE_CLOSE_MS ends
 * sessions: a registry that briefly shows no warm worker (a late heartbeat) refuses new
 * upgrades but keeps sessions. `natsDownForMs`: null while NATS is healthy; `breaker`:
 * null when no worker router runs in the process.
 */
export function upstreamAvailable(natsDownForMs: number | null, breaker: { available: boolean; retryAfterSeconds: number } | null): boolean {
  if (natsDownForMs !== null && natsDownForMs >= NATS_OUTAGE_CLOSE_MS) return false;
  return breaker ? breaker.available || breaker.retryAfterSeconds <= 0 : true;
}
