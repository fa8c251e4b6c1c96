import { CLOSE, type CloseReason } from "../../schemas/realtime";
import { closeFor, decideClose, type CloseCause, type SessionCheck, type SessionLimits } from "./close-rules";

/**
 * One realtime connection's life as a pure decider: where the connection stands (one
 * phase value), what its next input means, and what the gateway must do about it. The
 * gateway's session (services/realtime-gateway/session.ts) reports each input with the
 * facts it needs, keeps the state this returns, and carries the effects out in order
 * (ends the socket, answers a frame with an error, hands audio on, tells the VAD, holds
 * the session for a resume). The close rules (close-rules.ts, every close code of the
 * spec) are asked from here. No clock, no socket, no NATS in here: times come in the
 * inputs.
 *
 * ```
 *   opening ──resumed──▶ live ──session.close──▶ draining ──flushed, answered / 30 s──▶ closing (1000)
 *   (a resume: the VAD     │  any close rule, revocation, shed, stop ──▶ closing ──socket gone──▶ closed
 *    has not answered)     │  lost without a close frame (1006), or stopped for a restart, resumable ──▶ held
 *                          └─ (a held session ends later by resume.ts: its grace, or another connection)
 * ```
 */
export type ConnectionPhase =
  /** A resumed connection before the VAD has said where the timeline stands: audio is refused (resume_in_progress). */
  | { status: "opening" }
  /** Audio and messages flow. `resumable`: the client holds a resume credential (session.created or session.resumed carried one). */
  | { status: "live"; resumable: boolean }
  /** session.close: the VAD flushes, the connection waits (until `deadline`, epoch ms) for every committed item's result, then closes 1000. Audio is ignored. */
  | { status: "draining"; deadline: number }
  /**
   * The server ended the socket with `reason` and waits for it to go. `endVad`: tell
   * the VAD the session is over when it has gone (not when a drain cut short by another
   * close already asked the VAD to flush and end).
   */
  | { status: "closing"; reason: CloseReason; endVad: boolean }
  /** The connection let go of the session, which waits for a resume (resume.ts); `reason`: how the server ended the socket, if it did. */
  | { status: "held"; reason: CloseReason | null }
  /** The socket is gone and the session ended; `reason`: the server's close, null when the client closed or was lost. */
  | { status: "closed"; reason: CloseReason | null };

export interface ConnectionState {
  phase: ConnectionPhase;
  /** Epoch ms: the connection opened; the last audio arrived. */
  startedAt: number;
  lastAudioAt: number;
  /** When the sweep first saw the upstream unavailable (null while available). */
  upstreamLostAt: number | null;
  /** Committed items whose outcome has not reached the client yet. */
  pendingItems: number;
}

/** What happened to the connection, with the facts its rule reads. Times are epoch ms. */
export type ConnectionInput =
  /** The connection's start was sent (session.created, or the resume control); the key had this much audio left. */
  | { kind: "opened"; remainingAudioSeconds: number }
  /** A WebSocket frame arrived, before it is read. `bytesPerFrame`: one sample of every channel. */
  | { kind: "frame"; binary: boolean; bytes: number; bytesPerFrame: number; now: number }
  /** A parsed client message (the OpenAI door's, translated) is about to be applied. */
  | { kind: "message" }
  /** A taken frame's audio was counted: the session's audio against its limit and the budget granted so far. */
  | { kind: "audio_counted"; audioMs: number; allowanceMs: number; budgetExhausted: boolean }
  /** Audio was handed to the partition's publisher: how long the partition has been over its acks in flight. */
  | { kind: "audio_published"; overloadedMs: number; natsHealthy: boolean }
  /** A claim on the key's audio budget settled. */
  | { kind: "budget_settled"; audioMs: number; allowanceMs: number; budgetExhausted: boolean }
  /** An event was sent: uWS's answer (1 sent, 0 buffered, 2 dropped) and what the socket holds unsent. */
  | { kind: "event_sent"; result: number; bufferedBytes: number }
  /** A batch holding the session's audio failed; `refused`: the stream answered with a client-class error. */
  | { kind: "publish_failed"; refused: boolean; natsHealthy: boolean }
  /** A session event was forwarded (or the VAD flushed): where a graceful close stands. */
  | { kind: "event_forwarded"; vadFlushed: boolean; pendingItems: number }
  /** The client sent session.close. */
  | { kind: "close_requested"; now: number }
  /** The VAD answered a resume; `offered`: a credential for the next resume goes out with session.resumed. */
  | { kind: "resumed"; offered: boolean }
  /** The VAD did not answer a resume in time. */
  | { kind: "resume_failed" }
  /** The gateway's sweep (every 250 ms). */
  | { kind: "swept"; now: number; upstreamAvailable: boolean; bufferedBytes: number; overloadedMs: number; natsHealthy: boolean }
  /** The server ends the connection: the key revoked, the newest session shed, a handler threw, another connection resumed the session (after holding it). */
  | { kind: "stop"; cause: Exclude<CloseCause, "gateway_stopping" | "gateway_restarting" | "resume_failed"> }
  /** The OpenAI door read a text frame over its own limit. */
  | { kind: "door_frame_too_large" }
  /** The gateway stops; `natsHealthy`: a session held now can be stored. */
  | { kind: "gateway_stopping"; natsHealthy: boolean }
  /** The session is held for a resume (resume.ts: after the `hold` effect, or for a takeover). */
  | { kind: "hold"; code: number }
  /** The socket is gone (any reason), with the close code it went with. */
  | { kind: "socket_closed"; code: number; reason: string };

export type ConnectionEffect =
  /** End the socket with this close code and reason. */
  | { kind: "close"; reason: CloseReason }
  /** Answer the frame with an `error` event and drop it. */
  | { kind: "refuse_frame"; code: "invalid_audio_frame" | "resume_in_progress" }
  /** Read the text frame as one client message and apply it. */
  | { kind: "read_text" }
  /** Apply the parsed client message. */
  | { kind: "apply_message" }
  /** Take the binary frame's samples and count them (then report audio_counted). */
  | { kind: "take_audio" }
  /** Claim more of the key's audio budget ahead of the audio. */
  | { kind: "top_up" }
  /** Publish the counted samples to the VAD (then report audio_published). */
  | { kind: "publish_audio" }
  /** Send the partition's buffered audio now. */
  | { kind: "flush_audio" }
  /** Tell the VAD the session ends; `flush`: commit the open utterance first (a graceful close). */
  | { kind: "end_vad"; flush: boolean }
  /** Record usage (every 30 s of the session). */
  | { kind: "tick_usage"; now: number }
  /** Hold the session for a resume (resume.ts, which reports back with the `hold` input), under the close code the connection went with. */
  | { kind: "hold"; code: number }
  /** Let go of the connection's part (feed, publisher, usage, budget); `ended`: the session is over, record it closed with `code`. */
  | { kind: "release"; code: number; reason: string; ended: boolean };

export interface ConnectionDecision {
  state: ConnectionState;
  effects: ConnectionEffect[];
}

/** How long a graceful close (session.close) waits for the transcripts of the audio before it closes 1000 anyway. */
export const GRACEFUL_CLOSE_WAIT_MS = 30_000;

/** A connection's first state: a new session is live at once; a resumed one opens once the VAD answers. `resumable`: a credential went out with session.created. */
export function initialConnection(start: { kind: "new"; resumable: boolean } | { kind: "resume" }, now: number): ConnectionState {
  const phase: ConnectionPhase = start.kind === "resume" ? { status: "opening" } : { status: "live", resumable: start.resumable };
  return { phase, startedAt: now, lastAudioAt: now, upstreamLostAt: null, pendingItems: 0 };
}

/** The connection takes frames and messages and sends events (opening, live or draining). */
export function isConnected(phase: ConnectionPhase): boolean {
  return phase.status === "opening" || phase.status === "live" || phase.status === "draining";
}

/** A connection lost now would hold its session for a resume: the server did not decide the close, no graceful close is under way, and the client holds a credential. */
export function isResumable(phase: ConnectionPhase): boolean {
  return phase.status === "opening" || (phase.status === "live" && phase.resumable);
}

/** The close the server decided (null: none, or the client's). */
export function closeReasonOf(phase: ConnectionPhase): CloseReason | null {
  return phase.status === "closing" || phase.status === "held" || phase.status === "closed" ? phase.reason : null;
}

/** The connection no longer drives the session: held for a resume, or closed. */
export function isDetached(phase: ConnectionPhase): boolean {
  return phase.status === "held" || phase.status === "closed";
}

const none = (state: ConnectionState): ConnectionDecision => ({ state, effects: [] });

export function decideConnection(input: ConnectionInput, state: ConnectionState, limits: SessionLimits): ConnectionDecision {
  const { phase } = state;
  switch (input.kind) {
    case "opened":
      return closeOn(state, { kind: "opened", remainingAudioSeconds: input.remainingAudioSeconds }, limits) ?? { state, effects: [{ kind: "top_up" }] };
    case "frame":
      return decideFrame(input, state, limits);
    case "message":
      return isConnected(phase) ? { state, effects: [{ kind: "apply_message" }] } : none(state);
    case "audio_counted": {
      if (!isConnected(phase)) return none(state);
      const closed = closeOn(state, input, limits);
      if (closed) return closed;
      // after session.close, audio is counted and billed but not published
      return { state, effects: phase.status === "draining" ? [{ kind: "top_up" }] : [{ kind: "top_up" }, { kind: "publish_audio" }] };
    }
    case "budget_settled":
      if (!isConnected(phase)) return none(state);
      return closeOn(state, input, limits) ?? { state, effects: [{ kind: "top_up" }] };
    case "audio_published":
    case "event_sent":
    case "publish_failed":
      return (isConnected(phase) && closeOn(state, input, limits)) || none(state);
    case "event_forwarded": {
      const next = { ...state, pendingItems: input.pendingItems };
      if (!isConnected(phase)) return none(next);
      return closeOn(next, { kind: "event_forwarded", closeRequested: phase.status === "draining", vadFlushed: input.vadFlushed, pendingItems: input.pendingItems }, limits) ?? none(next);
    }
    case "close_requested":
      // flush the open utterance, wait (bounded) for its transcript, then close 1000: the VAD
      // answers with committed (if speech was open) and then rt.session.flushed
      if (!isConnected(phase)) return none(state);
      return { state: { ...state, phase: { status: "draining", deadline: input.now + GRACEFUL_CLOSE_WAIT_MS } }, effects: [{ kind: "end_vad", flush: true }, { kind: "flush_audio" }] };
    case "resumed":
      return phase.status === "opening" ? none({ ...state, phase: { status: "live", resumable: input.offered } }) : none(state);
    case "resume_failed":
      return isConnected(phase) ? closing(state, closeFor("resume_failed")) : none(state);
    case "swept":
      return decideSweep(input, state, limits);
    case "stop":
      // a takeover holds the session first, then ends its socket
      if (input.cause === "taken_over" && phase.status === "held" && phase.reason === null) {
        return { state: { ...state, phase: { status: "held", reason: closeFor("taken_over") } }, effects: [{ kind: "close", reason: closeFor("taken_over") }] };
      }
      return isConnected(phase) ? closing(state, closeFor(input.cause)) : none(state);
    case "door_frame_too_large":
      return isConnected(phase) ? closing(state, CLOSE.frameTooLarge) : none(state);
    case "gateway_stopping": {
      if (!isConnected(phase)) return none(state);
      // a restart: a session that can be resumed is held and its client told so (1012); the rest close 1013
      if (!isResumable(phase) || !input.natsHealthy) return closing(state, closeFor("gateway_stopping"));
      // held first (resume.ts answers with `hold`), then the socket ends 1012
      const reason = closeFor("gateway_restarting");
      return { state, effects: [{ kind: "hold", code: reason.code }, { kind: "close", reason }] };
    }
    case "hold":
      if (isDetached(phase)) return none(state);
      return { state: { ...state, phase: { status: "held", reason: closeReasonOf(phase) } }, effects: [{ kind: "release", code: input.code, reason: "", ended: false }] };
    case "socket_closed":
      return decideSocketClosed(input, state);
    default: {
      const never: never = input;
      return never;
    }
  }
}

function decideFrame(input: Extract<ConnectionInput, { kind: "frame" }>, state: ConnectionState, limits: SessionLimits): ConnectionDecision {
  if (!isConnected(state.phase)) return none(state);
  const verdict = decideClose({ kind: "frame_received", binary: input.binary, bytes: input.bytes, bytesPerFrame: input.bytesPerFrame }, limits);
  if (verdict.kind === "close") return closing(state, verdict.reason);
  if (!input.binary) return { state, effects: [{ kind: "read_text" }] };
  if (verdict.kind === "drop_frame") return { state, effects: [{ kind: "refuse_frame", code: "invalid_audio_frame" }] };
  if (input.bytes === 0) return none(state); // no samples, no audio: the idle timer runs on
  if (state.phase.status === "opening") return { state, effects: [{ kind: "refuse_frame", code: "resume_in_progress" }] };
  return { state: { ...state, lastAudioAt: input.now }, effects: [{ kind: "take_audio" }] };
}

/** The sweep's rules (close-rules.ts), and what a live connection does every sweep: never hold a partial 100 ms audio message longer than one, record usage. */
function decideSweep(input: Extract<ConnectionInput, { kind: "swept" }>, state: ConnectionState, limits: SessionLimits): ConnectionDecision {
  if (!isConnected(state.phase)) return none(state);
  const next = { ...state, upstreamLostAt: input.upstreamAvailable ? null : (state.upstreamLostAt ?? input.now) };
  const check: SessionCheck = {
    kind: "swept",
    now: input.now,
    startedAt: state.startedAt,
    lastAudioAt: state.lastAudioAt,
    gracefulDeadline: state.phase.status === "draining" ? state.phase.deadline : null,
    upstreamAvailable: input.upstreamAvailable,
    upstreamLostAt: next.upstreamLostAt,
    pendingItems: state.pendingItems,
    bufferedBytes: input.bufferedBytes,
    overloadedMs: input.overloadedMs,
    natsHealthy: input.natsHealthy,
  };
  const closed = closeOn(next, check, limits);
  if (closed) return closed;
  return state.phase.status === "draining" ? none(next) : { state: next, effects: [{ kind: "flush_audio" }, { kind: "tick_usage", now: input.now }] };
}

/** The socket went: a resumable connection lost without a close frame (1006) holds its session; anything else ends it. */
function decideSocketClosed(input: Extract<ConnectionInput, { kind: "socket_closed" }>, state: ConnectionState): ConnectionDecision {
  const { phase } = state;
  if (isDetached(phase)) return none(state);
  // resume.ts holds it and answers with `hold`
  if (input.code === 1006 && isResumable(phase)) return { state, effects: [{ kind: "hold", code: input.code }] };
  // the VAD is told the session is over, unless a graceful close already told it (flush) and was cut short
  const endVad = phase.status === "closing" ? phase.endVad : phase.status !== "draining";
  const effects: ConnectionEffect[] = endVad ? [{ kind: "end_vad", flush: false }] : [];
  effects.push({ kind: "release", code: input.code, reason: input.reason, ended: true });
  return { state: { ...state, phase: { status: "closed", reason: closeReasonOf(phase) } }, effects };
}

/** The close rules' verdict on `check`: a close (from `state`), or null to go on. */
function closeOn(state: ConnectionState, check: SessionCheck, limits: SessionLimits): ConnectionDecision | null {
  const verdict = decideClose(check, limits);
  return verdict.kind === "close" ? closing(state, verdict.reason) : null;
}

function closing(state: ConnectionState, reason: CloseReason): ConnectionDecision {
  const { phase } = state;
  // a drain that ends as a drain (1000) leaves the VAD to be told at the socket's end as any close does; one cut short by another close has told it already
  const endVad = phase.status !== "draining" || reason.code === CLOSE.normal.code;
  return { state: { ...state, phase: { status: "closing", reason, endVad } }, effects: [{ kind: "close", reason }] };
}
