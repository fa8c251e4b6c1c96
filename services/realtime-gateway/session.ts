import { type ClientMessage, type ServerEvent, type TurnDetection } from "../../schemas/realtime";
import {
  decideConnection,
  initialConnection,
  isConnected,
  isDetached,
  isResumable,
  type ConnectionEffect,
  type ConnectionInput,
  type ConnectionState,
} from "../../domain/sessions/connection";
import type { Admission } from "./admit";
import { applyClientMessage, audioFrameRefusal, initialSettings, readClientFrame, type MessageTarget, type SessionSettings } from "./client-messages";
import { sessionCreated } from "./session-lifecycle";
import { openConnectionIo, sessionLimits, type IoDeps, type SessionSocket, type SessionStart } from "./session-io";

export { partitionOf } from "./session-io";
import { createSessionMetrics } from "./session-metrics";

/**
 * One realtime connection from `open` to `close`, as the shell of its decider
 * (domain/sessions/connection.ts): every frame, client message, forwarded event, sweep,
 * resume answer and stop is an input; the decider's phase (opening, live, draining,
 * closing, held, closed) is the connection's one state, and its effects are carried out
 * here on the connection's I/O (session-io.ts: audio in, aligned and published per lane;
 * the key's budget and usage; session events out, session-feed.ts).
 */
export interface SessionDeps extends IoDeps {
  defaultTurnDetection: TurnDetection;
  /** Sessions are decoded while spoken (config realtime.streaming); shown in session.created. */
  streaming?: boolean;
  /** The connection no longer drives the session (ended, or held for a resume): it leaves the gateway's open set. */
  onClosed(session: Session): void;
  /** The connection was lost (or its gateway stops) and the session can be resumed: hold it (resume.ts `hold`, which answers with `session.hold`). */
  onLost(session: Session, code: number): void;
  /** Each VAD decision's latency as the gateway measures it (ms), for admission (headroom.ts). */
  onDecision?(latencyMs: number): void;
}

export type Session = ReturnType<typeof openSession>;

export function openSession(admission: Admission, socket: SessionSocket, deps: SessionDeps, start: SessionStart = { kind: "new", offer: () => undefined }) {
  const limits = sessionLimits(admission, deps);
  const metrics = createSessionMetrics(deps.now, deps.onDecision);
  const offer = start.kind === "new" ? start.offer(0) : undefined;
  let state: ConnectionState = initialConnection(start.kind === "new" ? { kind: "new", resumable: offer !== undefined } : start, deps.now());
  let settings: SessionSettings = initialSettings(admission, deps.defaultTurnDetection);
  // a close decided while the gateway opens the connection waits for it (a close inside `open` would skip cleanup)
  let opening = true;
  let released: Promise<void> = Promise.resolve();

  /** One input through the decider; its effects carried out in order (a frame's own, take_audio and the like, by the caller). */
  const step = (input: ConnectionInput): ConnectionEffect[] => {
    const decision = decideConnection(input, state, limits);
    state = decision.state;
    for (const effect of decision.effects) carry(effect);
    return decision.effects;
  };
  const carry = (effect: ConnectionEffect) => {
    switch (effect.kind) {
      case "close": {
        const { code, reason } = effect.reason;
        return void (opening ? setImmediate(() => state.phase.status === "closing" && socket.end(code, reason)) : socket.end(code, reason));
      }
      case "top_up":
        return io.allowance.topUp();
      case "flush_audio":
        return io.publisher.flush();
      case "end_vad":
        return io.control({ kind: "end", flush: effect.flush });
      case "tick_usage":
        return io.usage.tick(effect.now);
      case "hold":
        return deps.onLost(session, effect.code);
      case "release":
        return void (released = release(effect).catch((err) => io.log.warn("session cleanup failed", { error: (err as Error).message })));
      default:
        return; // a frame's or message's own (refuse_frame, read_text, apply_message, take_audio, publish_audio): the caller's
    }
  };
  const release = async ({ code, reason, ended }: Extract<ConnectionEffect, { kind: "release" }>) => {
    metrics.closed(code);
    await io.release(() => deps.onClosed(session));
    if (ended) await io.recordClosed(code, reason);
  };

  const send = (event: ServerEvent) => {
    if (!isConnected(state.phase)) return;
    metrics.sent(event, settings.turnDetection.type === "server_vad" ? settings.turnDetection.silence_duration_ms : null);
    const result = socket.send(event);
    step({ kind: "event_sent", result, bufferedBytes: result === 2 ? 0 : socket.bufferedAmount() });
  };
  const sendError = (code: string, message: string, clientEventId: string | null = null, param?: string) =>
    send({ type: "error", event_id: io.newEventId(), error: { type: "invalid_request_error", code, message, event_id: clientEventId, ...(param ? { param } : {}) } });
  const io = openConnectionIo(admission, socket, deps, start, { report: (input) => void step(input), send, detached: () => isDetached(state.phase) });

  io.begin(settings);
  if (start.kind === "new") send({ ...sessionCreated(admission, settings, deps.streaming ?? false), ...(offer ? { resume: offer } : {}) });
  step({ kind: "opened", remainingAudioSeconds: admission.remainingAudioSeconds });
  opening = false;

  const messageTarget: MessageTarget = {
    streaming: deps.streaming ?? false,
    settings: () => settings,
    changeSettings: (next) => void (settings = next),
    control: io.control,
    send,
    sendError,
    newEventId: io.newEventId,
    closeGracefully: () => void step({ kind: "close_requested", now: deps.now() }),
  };

  const session = {
    id: admission.sessionId,
    /** The session's ownership generation this connection drives it under (0: it opened the session). */
    gen: io.gen,
    keyId: admission.principal.keyId,
    admission,
    /** A binary frame: PCM16LE at the session's rate and channel count (from the OpenAI door: a view of its decoded audio). */
    onAudio(frame: ArrayBuffer | Uint8Array) {
      const [first] = step({ kind: "frame", binary: true, bytes: frame.byteLength, bytesPerFrame: io.bytesPerFrame, now: deps.now() });
      if (first?.kind === "refuse_frame") return sendError(first.code, audioFrameRefusal(first.code, frame.byteLength, admission.channels));
      if (first?.kind !== "take_audio") return;
      const samples = io.take(frame);
      metrics.audio(frame.byteLength, io.audioMs());
      if (!step({ kind: "audio_counted", ...io.budget() }).some((e) => e.kind === "publish_audio")) return;
      io.publisher.push(samples);
      step({ kind: "audio_published", overloadedMs: io.publisher.overloadedForMs(deps.now()), natsHealthy: io.natsHealthy() });
    },
    /** A text frame: one JSON client message. */
    onText(frame: ArrayBuffer) {
      if (step({ kind: "frame", binary: false, bytes: frame.byteLength, bytesPerFrame: io.bytesPerFrame, now: deps.now() })[0]?.kind !== "read_text") return;
      const read = readClientFrame(frame);
      if (!read.ok) return sendError(read.code, read.message, read.clientEventId, read.param);
      applyClientMessage(read.message, read.clientEventId, messageTarget);
    },
    /** A parsed client message (the OpenAI door's, translated). */
    onMessage(message: ClientMessage, clientEventId: string | null) {
      if (step({ kind: "message" })[0]?.kind === "apply_message") applyClientMessage(message, clientEventId, messageTarget);
    },
    /** The OpenAI door read a text frame over its limit: 1009. */
    frameTooLarge: () => void step({ kind: "door_frame_too_large" }),
    /** The session's key was revoked (on any gateway): close 1008 key_revoked now. */
    revoke: () => void step({ kind: "stop", cause: "key_revoked" }),
    /** The plane is far behind and this is the gateway's newest session: 1013 upstream_backpressure now. */
    shed: () => void step({ kind: "stop", cause: "load_shed" }),
    /** A handler threw: 1011 client_error. */
    fail: () => void step({ kind: "stop", cause: "handler_failed" }),
    /** Another connection resumed this session: this one ends 4409 session_taken_over (the caller holds it first). */
    takenOver: () => void step({ kind: "stop", cause: "taken_over" }),
    /** The gateway stops: held and closed 1012 if it can be resumed (and stored: `natsHealthy`), else 1013. */
    stopping: (natsHealthy: boolean) => void step({ kind: "gateway_stopping", natsHealthy }),
    /** Called by the gateway's sweep (every 250 ms); `upstreamAvailable` false (workers' breaker open, NATS down too long) closes 1013, once the items committed before have their outcome (at most OUTCOME_GRACE_MS). */
    tick(now: number, upstreamAvailable: boolean) {
      metrics.flush();
      if (!isConnected(state.phase)) return;
      step({ kind: "swept", now, upstreamAvailable, bufferedBytes: socket.bufferedAmount(), overloadedMs: io.publisher.overloadedForMs(now), natsHealthy: io.natsHealthy() });
    },
    /** The socket is gone (any reason): held for a resume (through `onLost`), or ended: the VAD told, usage recorded, released. True if the session ended. */
    socketClosed(code: number, reason: string): boolean {
      return step({ kind: "socket_closed", code, reason }).some((e) => e.kind === "release" && e.ended);
    },
    /**
     * The socket is gone, or going, and the session waits for a resume (resume.ts): the
     * feed stops, the audio so far is published and billed, the VAD keeps the session.
     * `end` ends it later as a close would have (grace over).
     */
    async hold(code: number): Promise<{ end(reason: string): Promise<void> }> {
      step({ kind: "hold", code });
      await released;
      return io.heldHandle(code);
    },
    /** Whether a lost connection would hold the session for a resume (domain/sessions/connection.ts isResumable). */
    get resumable() {
      return isResumable(state.phase);
    },
    /** The connection takes frames and messages (opening, live or draining). */
    get connected() {
      return isConnected(state.phase);
    },
    /** Held for a resume or closed: the connection no longer drives the session. */
    get detached() {
      return isDetached(state.phase);
    },
  };
  return session;
}
