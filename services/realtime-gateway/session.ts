import { JetStreamApiError } from "@nats-io/jetstream";
import { randomUUID } from "node:crypto";
import { DEFAULT_PARTIAL_INTERVAL_MS, type AudioControl, type ClientMessage, type CloseReason, type ServerEvent, type SessionCreated, type TurnDetection } from "../../schemas/realtime";
import { closeFor, decideClose, type SessionCheck, type SessionLimits } from "../../domain/sessions/close-rules";
import type { SessionStore } from "../../domain/sessions/store";
import { createFrameAligner } from "../../shared/audio/resample";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import type { UsageStore } from "../../domain/usage/store";
import type { Admission } from "./admit";
import type { AudioBatcher } from "./audio-publisher";
import { readClientFrame, updateSettings, type SessionSettings } from "./client-messages";
import { createAudioAllowance, createUsageMeter } from "./session-accounting";
import { forwardLaneEvents, openSessionAudio, type SessionAudio } from "./session-channels";
import { createSessionMetrics } from "./session-metrics";

/**
 * One realtime connection from `open` to `close`: audio in (aligned, resampled to
 * 16 kHz mono, published to JetStream), client messages (parsed; bad ones answered
 * with an error event), session events out (session-feed.ts), the close rules
 * (domain/sessions/close-rules.ts) asked on every frame and by the gateway's sweep,
 * usage recorded every 30 s and at close (session-accounting.ts), the lifecycle
 * recorded through the sessions store.
 */
export interface SessionSocket {
  /** uWS semantics: 1 sent, 0 buffered (backpressure), 2 dropped. */
  send(text: string): number;
  bufferedAmount(): number;
  end(code: number, reason: string): void;
}

export interface SessionDeps {
  nats: Nats;
  usage: Pick<UsageStore, "record">;
  /** The only writer of rt.evt: the session's opened and closed facts go through it. */
  sessions: SessionStore;
  logger: Logger;
  gatewayId: string;
  partitions: number;
  maxFrameBytes: number;
  /** The gateway's audio batches to JetStream (one per VAD partition per interval). */
  audio: AudioBatcher;
  /** How long a partition's batches in flight may stay over RT_MAX_PENDING_ACKS before its sessions close 1013 upstream_unavailable while NATS is down. */
  backpressureGraceMs: number;
  maxClientBufferBytes: number;
  defaultTurnDetection: TurnDetection;
  /** Sessions are decoded while spoken (config realtime.streaming); shown in session.created. */
  streaming?: boolean;
  now: () => number;
  onClosed(session: Session): void;
  /** Each VAD decision's latency as the gateway measures it (ms), for admission (headroom.ts). */
  onDecision?(latencyMs: number): void;
}

const GRACEFUL_CLOSE_WAIT_MS = 30_000;

export function partitionOf(sessionId: string, partitions: number): number {
  let h = 2166136261;
  for (let i = 0; i < sessionId.length; i++) h = Math.imul(h ^ sessionId.charCodeAt(i), 16777619);
  return (h >>> 0) % partitions;
}

/**
 * A publish JetStream answered with a client-class API error (e.g. 10054 "message size
 * exceeds maximum allowed" after an operator shrank the stream's limits): retrying
 * elsewhere will not help, so the session ends 1011 client_error ("unexpected gateway
 * error"). Timeouts, no responders, a closed connection and 5xx answers are the
 * upstream being away: 1013 upstream_unavailable, try again later.
 */
function refusedByStream(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.apiError().code < 500;
}

export type Session = ReturnType<typeof openSession>;

export function openSession(admission: Admission, socket: SessionSocket, deps: SessionDeps) {
  const { sessionId, principal, limits } = admission;
  const log = deps.logger.child({ sessionId, keyId: principal.keyId });
  const startedAt = deps.now();
  const rules: SessionLimits = {
    maxFrameBytes: deps.maxFrameBytes,
    maxAudioSecondsPerSession: limits.maxAudioSecondsPerSession,
    maxSessionSeconds: limits.maxSessionSeconds,
    idleTimeoutSeconds: limits.idleTimeoutSeconds,
    maxClientBufferBytes: deps.maxClientBufferBytes,
    backpressureGraceMs: deps.backpressureGraceMs,
  };
  let lastAudioAt = startedAt;
  let inputFrames = 0; // per-channel frames at the client's rate
  const metrics = createSessionMetrics(deps.now, deps.onDecision);
  let closing: CloseReason | null = null;
  let gracefulDeadline: number | null = null;
  let closedDone = false; // the socket is gone
  let settings: SessionSettings = {
    turnDetection: deps.defaultTurnDetection,
    transcription: { language: admission.language, prompt: admission.prompt, model: null },
    partials: { partial_interval_ms: DEFAULT_PARTIAL_INTERVAL_MS, interim_results: false, smart_format: true },
  };
  // Every accepted frame holds whole sample frames (a frame that does not is refused
  // below), so the aligner never carries a byte over: it only hands back a view.
  const bytesPerFrame = 2 * admission.channels;
  const aligner = createFrameAligner(bytesPerFrame);
  // multichannel: every channel's seconds count (billing, budget, the session's audio limit; docs/realtime.md "Multichannel")
  const billedChannels = admission.multichannel ? admission.channels : 1;
  const audioMs = () => Math.round((inputFrames * 1000 * billedChannels) / admission.sampleRate);
  const natsHealthy = () => deps.nats.health().ok;

  /** Ends the socket with a close code; cleanup happens in `closed`. */
  const close = (reason: CloseReason) => {
    if (closing) return;
    closing = reason;
    socket.end(reason.code, reason.reason);
  };
  /** Ends the wait of a graceful close (session.close), then the socket. */
  const finish = (reason: CloseReason) => {
    gracefulDeadline = null;
    close(reason);
  };
  /** Asks the close rules and carries a close out (`end`: close, or finish for a graceful close); true if it closes. */
  const closeIf = (check: SessionCheck, end = close): boolean => {
    const verdict = decideClose(check, rules);
    if (verdict.kind !== "close") return false;
    end(verdict.reason);
    return true;
  };

  // one lane to the VAD, or one per channel (session-channels.ts)
  const publisher: SessionAudio = openSessionAudio({
    sessionId,
    sampleRate: admission.sampleRate,
    channels: admission.channels,
    multichannel: admission.multichannel,
    batcher: deps.audio,
    partitionOf: (laneId) => partitionOf(laneId, deps.partitions),
    onFailure: (err) => {
      const refused = refusedByStream(err);
      log.warn(refused ? "audio refused by the stream" : "audio publish failed", { error: err instanceof Error ? err.message : String(err) });
      closeIf({ kind: "publish_failed", refused, natsHealthy: natsHealthy() });
    },
  });
  const allowance = createAudioAllowance(admission.budget, {
    audioMs,
    closed: () => closedDone,
    log,
    settled: () => {
      if (!closeIf({ kind: "budget_settled", audioMs: audioMs(), allowanceMs: allowance.allowanceMs, budgetExhausted: allowance.exhausted })) allowance.topUp();
    },
  });
  const usage = createUsageMeter(deps.usage, admission, { startedAt, audioMs, now: deps.now, log });

  const send = (event: ServerEvent) => {
    if (closing || closedDone) return;
    metrics.sent(event, settings.turnDetection.type === "server_vad" ? settings.turnDetection.silence_duration_ms : null);
    const result = socket.send(JSON.stringify(event));
    closeIf({ kind: "event_sent", result, bufferedBytes: result === 2 ? 0 : socket.bufferedAmount() });
  };
  const sendError = (code: string, message: string, clientEventId: string | null = null) =>
    send({ type: "error", event_id: `evt_${randomUUID()}`, error: { type: "invalid_request_error", code, message, event_id: clientEventId } });

  // committed items whose outcome has not reached the client, and when the sweep first saw the upstream gone
  let pendingItems = 0;
  let upstreamLostAt: number | null = null;
  const subscription = forwardLaneEvents(deps.nats, publisher.lanes, send, (progress) => {
    pendingItems = progress.pendingItems;
    closeIf({ kind: "event_forwarded", closeRequested: gracefulDeadline !== null, ...progress }, finish);
  });

  const control = (message: AudioControl) => publisher.control(message);
  announce(admission, deps, settings, control, log);
  send(sessionCreated(admission, settings, deps.streaming ?? false));
  // after the gateway has registered the session (a close inside `open` would skip cleanup)
  const atOpen = decideClose({ kind: "opened", remainingAudioSeconds: admission.remainingAudioSeconds }, rules);
  if (atOpen.kind === "close") setImmediate(() => close(atOpen.reason));
  else allowance.topUp();

  const messageTarget: MessageTarget = {
    streaming: deps.streaming ?? false,
    settings: () => settings,
    changeSettings: (next) => {
      settings = next;
    },
    control,
    send,
    sendError,
    closeGracefully: () => {
      // Flush the open utterance, wait (bounded) for its transcript, then close 1000.
      gracefulDeadline = deps.now() + GRACEFUL_CLOSE_WAIT_MS;
      // The VAD answers with committed (if speech was open) and then rt.session.flushed;
      // the socket closes once that has arrived and every committed item has its result.
      control({ kind: "end", flush: true });
      publisher.flush();
    },
  };

  return {
    id: sessionId,
    keyId: principal.keyId,
    admission,
    /** A binary frame: PCM16LE at the session's rate and channel count. */
    onAudio(frame: ArrayBuffer) {
      if (closing) return;
      const verdict = decideClose({ kind: "frame_received", binary: true, bytes: frame.byteLength, bytesPerFrame }, rules);
      if (verdict.kind === "close") return close(verdict.reason);
      if (verdict.kind === "drop_frame") {
        return sendError(
          "invalid_audio_frame",
          `Binary frame of ${frame.byteLength} bytes dropped: each frame must hold whole samples, a multiple of ${bytesPerFrame} bytes (PCM16LE, ${admission.channels} channel${admission.channels === 1 ? "" : "s"}).`,
        );
      }
      lastAudioAt = deps.now();
      const samples = aligner.push(new Uint8Array(frame));
      inputFrames += samples.length / admission.channels;
      metrics.audio(frame.byteLength, audioMs());
      if (closeIf({ kind: "audio_counted", audioMs: audioMs(), allowanceMs: allowance.allowanceMs, budgetExhausted: allowance.exhausted })) return;
      allowance.topUp();
      if (gracefulDeadline) return; // after session.close, audio is ignored
      publisher.push(samples);
      closeIf({ kind: "audio_published", overloadedMs: publisher.overloadedForMs(deps.now()), natsHealthy: natsHealthy() });
    },
    /** A text frame: one JSON client message. */
    onText(frame: ArrayBuffer) {
      if (closing) return;
      if (closeIf({ kind: "frame_received", binary: false, bytes: frame.byteLength, bytesPerFrame })) return;
      const read = readClientFrame(frame);
      if (!read.ok) return sendError(read.code, read.message, read.clientEventId);
      applyClientMessage(read.message, read.clientEventId, messageTarget);
    },
    /** The session's key was revoked (on any gateway): close 1008 key_revoked now. */
    revoke() {
      close(closeFor("key_revoked"));
    },
    /** The plane is far behind and this is the gateway's newest session: 1013 upstream_backpressure now. */
    shed() {
      close(closeFor("load_shed"));
    },
    /** Called by the gateway's sweep (every 250 ms); `upstreamAvailable` false (workers' breaker open, NATS down too long) closes 1013, once the items committed before have their outcome (at most OUTCOME_GRACE_MS). */
    tick(now: number, upstreamAvailable: boolean) {
      metrics.flush();
      if (closing) return;
      upstreamLostAt = upstreamAvailable ? null : (upstreamLostAt ?? now);
      const check: SessionCheck = {
        kind: "swept",
        now,
        startedAt,
        lastAudioAt,
        gracefulDeadline,
        upstreamAvailable,
        upstreamLostAt,
        pendingItems,
        bufferedBytes: socket.bufferedAmount(),
        overloadedMs: publisher.overloadedForMs(now),
        natsHealthy: natsHealthy(),
      };
      if (closeIf(check, gracefulDeadline ? finish : close) || gracefulDeadline) return;
      publisher.flush(); // never hold a partial 100 ms message longer than a sweep
      usage.tick(now);
    },
    /** The socket is gone (any reason): stop, tell the VAD, account, release. */
    async closed(code: number, reason: string) {
      if (closedDone) return;
      closedDone = true;
      metrics.closed(code);
      subscription.unsubscribe();
      if (!gracefulDeadline) control({ kind: "end", flush: false });
      publisher.flush();
      deps.onClosed(this as Session);
      await publisher.settled();
      await usage.final();
      // give back the budget granted ahead of audio that never came
      await allowance.release();
      await deps.sessions
        .closed({ session_id: sessionId, code, reason, audio_ms: audioMs(), duration_ms: Math.max(0, deps.now() - startedAt) })
        .catch((err) => log.warn("could not record session event", { type: "rt.session.closed", error: (err as Error).message }));
    },
    get closeReason() {
      return closing;
    },
    stats() {
      return { audioMs: audioMs(), published: publisher.messagesPublished, pendingAcks: publisher.pendingAcks };
    },
  };
}

/** The session's start: its settings to the VAD (in-band, before any audio) and its opened fact to rt.evt. */
function announce(admission: Admission, deps: SessionDeps, settings: SessionSettings, control: (message: AudioControl) => void, log: Logger) {
  const { sessionId, principal } = admission;
  control({
    kind: "start",
    turn_detection: settings.turnDetection,
    ...settings.transcription,
    max_concurrent_utterances: admission.limits.maxConcurrentUtterances,
    key_id: principal.keyId,
    owner_id: principal.ownerId,
    ...settings.partials,
  });
  void deps.sessions
    .opened({
      session_id: sessionId,
      request_id: admission.requestId,
      key_id: principal.keyId,
      owner_id: principal.ownerId,
      plan: principal.plan,
      gateway_id: deps.gatewayId,
      sample_rate: admission.sampleRate,
      channels: admission.channels,
    })
    .catch((err) => log.warn("could not record session event", { type: "rt.session.opened", error: (err as Error).message }));
}

/** What a client message acts on. */
interface MessageTarget {
  /** The engine decodes while spoken (semantic_vad needs it). */
  streaming: boolean;
  settings(): SessionSettings;
  changeSettings(next: SessionSettings): void;
  control(message: AudioControl): void;
  send(event: ServerEvent): void;
  sendError(code: string, message: string, clientEventId: string | null): void;
  /** session.close: flush, wait for the transcripts, then 1000. */
  closeGracefully(): void;
}

/** One client message: a control to the VAD, a settings change answered, or a graceful close. */
function applyClientMessage(message: ClientMessage, clientEventId: string | null, to: MessageTarget): void {
  switch (message.type) {
    case "input_audio_buffer.commit":
      return to.control({ kind: "commit", event_id: clientEventId });
    case "input_audio_buffer.clear":
      return to.control({ kind: "clear", event_id: clientEventId });
    case "session.update": {
      const update = updateSettings(to.settings(), message.session, to.streaming);
      if (!update.ok) return to.sendError(update.code, update.message, clientEventId);
      const next = update.settings;
      to.changeSettings(next);
      to.control({ kind: "update", turn_detection: next.turnDetection, ...next.transcription, ...next.partials });
      to.send({
        type: "session.updated",
        event_id: `evt_${randomUUID()}`,
        session: { turn_detection: next.turnDetection, input_audio_transcription: { ...next.transcription, ...next.partials } },
      });
      return;
    }
    case "session.close":
      return to.closeGracefully();
    default: {
      const never: never = message;
      return never;
    }
  }
}

/** session.created, exactly the fields of spec 6.1 (plus the VAD and streaming settings). */
function sessionCreated(admission: Admission, settings: SessionSettings, streaming: boolean): SessionCreated {
  const { principal, limits } = admission;
  return {
    type: "session.created",
    request_id: admission.requestId,
    session_id: admission.sessionId,
    audio: { format: "pcm_s16le", sample_rate: admission.sampleRate, channels: admission.channels, ...(admission.multichannel ? { multichannel: true } : {}) },
    turn_detection: settings.turnDetection,
    plan: principal.plan,
    limits: {
      max_concurrent_utterances: limits.maxConcurrentUtterances,
      max_session_seconds: limits.maxSessionSeconds,
      idle_timeout_seconds: limits.idleTimeoutSeconds,
      remaining_audio_seconds: admission.remainingAudioSeconds,
    },
    input_audio_transcription: { streaming, ...settings.partials },
    turn_detection_types: streaming ? ["server_vad", "semantic_vad"] : ["server_vad"],
  };
}
