import { JetStreamApiError } from "@nats-io/jetstream";
import { INTERNAL_SAMPLE_RATE, DEFAULT_PARTIAL_INTERVAL_MS, type AudioControl, type ClientMessage, type CloseReason, type ServerEvent, type TurnDetection } from "../../schemas/realtime";
import { closeFor, decideClose, type SessionCheck, type SessionLimits } from "../../domain/sessions/close-rules";
import type { SessionStore } from "../../domain/sessions/store";
import { createFrameAligner } from "../../shared/audio/resample";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import type { UsageStore } from "../../domain/usage/store";
import type { Admission } from "./admit";
import type { AudioBatcher } from "./audio-publisher";
import { applyClientMessage, readClientFrame, type MessageTarget, type SessionSettings } from "./client-messages";
import { announce, heldEnd, sessionCreated } from "./session-lifecycle";
import { createAudioAllowance, createUsageMeter } from "./session-accounting";
import { forwardLaneEvents, openSessionAudio, type LanesReplay, type SessionAudio } from "./session-channels";
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
  /** One server event in the door's wire protocol (native JSON, or OpenAI's: openai-door.ts). uWS semantics: 1 sent, 0 buffered (backpressure), 2 dropped. */
  send(event: ServerEvent): number;
  bufferedAmount(): number;
  end(code: number, reason: string): void;
  /** A stored event a resume's replay passes over (the client has it: session-feed.ts `prior`); the OpenAI door rebuilds its state from it. */
  prior?(event: ServerEvent): void;
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
 * A publish JetStream answered with a client-class API error (e.g. 10054 "message size exceeds
 * maximum allowed" after an operator shrank the stream's limits): retrying elsewhere will not help,
 * so the session ends 1011 client_error. Timeouts, no responders, a closed connection and 5xx
 * answers are the upstream being away: 1013 upstream_unavailable, try again later.
 */
function refusedByStream(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.apiError().code < 500;
}

export type Session = ReturnType<typeof openSession>;

/** A resume credential offered to the client (schemas/realtime.ts resumeOffer). */
export interface ResumeOffer {
  credential: string;
  grace_seconds: number;
}

/**
 * How a connection starts its session: a new session, or the resume of a held one as
 * its `gen`-th owner (resume.ts): no start control and no opened fact, a resume control
 * instead; the stored events after the client's position (one per lane: a multichannel
 * session's channels each have theirs) are replayed once the VAD has answered, and audio is taken from then on. `offer(gen)` is the credential for
 * the next resume (undefined when the gateway has no token secret).
 */
export type SessionStart =
  | { kind: "new"; offer(gen: number): ResumeOffer | undefined }
  | { kind: "resume"; gen: number; afterEventIds: readonly (string | null)[]; offer(gen: number): ResumeOffer | undefined };

/** How long a resumed connection waits for the VAD's answer before it closes 1013. */
const RESUME_ANSWER_WAIT_MS = 10_000;
/** A connection's audio entries and usage records are numbered from gen × these, so ids never repeat across a session's connections. */
const SEQS_PER_CONNECTION = 2 ** 20;
const USAGE_PARTS_PER_CONNECTION = 100_000;

export function openSession(admission: Admission, socket: SessionSocket, deps: SessionDeps, start: SessionStart = { kind: "new", offer: () => undefined }) {
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
    transcription: { language: admission.language, prompt: admission.prompt, model: null, ...(admission.keyterms ? { keyterms: admission.keyterms } : {}) },
    partials: { partial_interval_ms: DEFAULT_PARTIAL_INTERVAL_MS, interim_results: false, smart_format: true },
  };
  // Every accepted frame holds whole sample frames (a frame that does not is refused
  // below), so the aligner never carries a byte over: it only hands back a view.
  const bytesPerFrame = 2 * admission.channels;
  const aligner = createFrameAligner(bytesPerFrame);
  // multichannel: every channel's seconds count (billing, budget, the session's audio limit; docs/realtime-reference.md "Multichannel")
  const billedChannels = admission.multichannel ? admission.channels : 1;
  const audioMs = () => Math.round((inputFrames * 1000 * billedChannels) / admission.sampleRate);
  const natsHealthy = () => deps.nats.health().ok;
  const gen = start.kind === "resume" ? start.gen : 0;
  /** A resumed connection takes audio once the VAD has said where the timeline stands. */
  let awaitingResume = start.kind === "resume";
  /** The client holds a credential for this session (session.created or session.resumed carried one). */
  let resumeOffered = start.kind === "resume";

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
    firstSeq: gen * SEQS_PER_CONNECTION,
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
  const usage = createUsageMeter(deps.usage, admission, { startedAt, audioMs, now: deps.now, log, firstPart: gen * USAGE_PARTS_PER_CONNECTION });

  const send = (event: ServerEvent) => {
    if (closing || closedDone) return;
    metrics.sent(event, settings.turnDetection.type === "server_vad" ? settings.turnDetection.silence_duration_ms : null);
    const result = socket.send(event);
    closeIf({ kind: "event_sent", result, bufferedBytes: result === 2 ? 0 : socket.bufferedAmount() });
  };
  const sendError = (code: string, message: string, clientEventId: string | null = null, param?: string) =>
    send({ type: "error", event_id: feed.directEventId(), error: { type: "invalid_request_error", code, message, event_id: clientEventId, ...(param ? { param } : {}) } });

  // committed items whose outcome has not reached the client, and when the sweep first saw the upstream gone
  let pendingItems = 0;
  let upstreamLostAt: number | null = null;
  const replay: LanesReplay | undefined =
    start.kind === "resume"
      ? {
          gen,
          afterEventIds: start.afterEventIds,
          waitMs: RESUME_ANSWER_WAIT_MS,
          prior: socket.prior?.bind(socket),
          onResumed: ({ position, floorMs, replayed }) => {
            // whole milliseconds: the client resends from audio_ms, the VAD drops the overlap (< 1 ms);
            // never before what the session already decided (a VAD that restarted answers 0: it realigns on the offset)
            const audioMsAt = Math.max(floorMs, Math.floor(position / (INTERNAL_SAMPLE_RATE / 1000)));
            publisher.resumeAt(audioMsAt * (INTERNAL_SAMPLE_RATE / 1000));
            awaitingResume = false;
            const offer = start.offer(gen);
            resumeOffered = offer !== undefined;
            if (offer) send({ type: "session.resumed", event_id: feed.directEventId(), session_id: sessionId, audio_ms: audioMsAt, replayed, resume: offer });
          },
          onFailed: (err) => {
            log.warn("resume failed", { error: err.message });
            close(closeFor("resume_failed"));
          },
        }
      : undefined;
  const feed = forwardLaneEvents(
    deps.nats,
    publisher.lanes,
    send,
    (progress) => {
      pendingItems = progress.pendingItems;
      closeIf({ kind: "event_forwarded", closeRequested: gracefulDeadline !== null, ...progress }, finish);
    },
    replay,
  );

  const control = (message: AudioControl) => publisher.control(message);
  if (start.kind === "resume") {
    control({ kind: "resume", gen });
    publisher.flush();
  } else {
    announce(admission, deps, settings, control, log);
    const offer = start.offer(0);
    resumeOffered = offer !== undefined;
    send({ ...sessionCreated(admission, settings, deps.streaming ?? false), ...(offer ? { resume: offer } : {}) });
  }
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
    newEventId: () => feed.directEventId(),
    closeGracefully: () => {
      // Flush the open utterance, wait (bounded) for its transcript, then close 1000.
      gracefulDeadline = deps.now() + GRACEFUL_CLOSE_WAIT_MS;
      // The VAD answers with committed (if speech was open) and then rt.session.flushed;
      // the socket closes once that has arrived and every committed item has its result.
      control({ kind: "end", flush: true });
      publisher.flush();
    },
  };

  /** Stops the connection's part: no more events, its audio published, its usage recorded, its unused budget given back. */
  const detach = async (self: Session, code: number) => {
    metrics.closed(code);
    feed.unsubscribe();
    publisher.release();
    deps.onClosed(self);
    await publisher.settled();
    await usage.final();
    // give back the budget granted ahead of audio that never came
    await allowance.release();
  };
  const recordClosed = (code: number, reason: string) =>
    deps.sessions
      .closed({ session_id: sessionId, code, reason, audio_ms: audioMs(), duration_ms: Math.max(0, deps.now() - startedAt) })
      .then(
        () => undefined,
        (err) => log.warn("could not record session event", { type: "rt.session.closed", error: (err as Error).message }),
      );

  return {
    id: sessionId,
    /** The session's ownership generation this connection drives it under (0: it opened the session). */
    gen,
    keyId: principal.keyId,
    admission,
    /** A binary frame: PCM16LE at the session's rate and channel count (from the OpenAI door: a view of its decoded audio). */
    onAudio(frame: ArrayBuffer | Uint8Array) {
      if (closing) return;
      const verdict = decideClose({ kind: "frame_received", binary: true, bytes: frame.byteLength, bytesPerFrame }, rules);
      if (verdict.kind === "close") return close(verdict.reason);
      if (verdict.kind === "drop_frame") {
        return sendError(
          "invalid_audio_frame",
          `Binary frame of ${frame.byteLength} bytes dropped: each frame must hold whole samples, a multiple of ${bytesPerFrame} bytes (PCM16LE, ${admission.channels} channel${admission.channels === 1 ? "" : "s"}).`,
        );
      }
      if (frame.byteLength === 0) return; // no samples, no audio: the idle timer runs on
      if (awaitingResume) {
        return sendError("resume_in_progress", "Audio before session.resumed is dropped: wait for it, then send audio from its audio_ms on.");
      }
      lastAudioAt = deps.now();
      const samples = aligner.push(frame instanceof Uint8Array ? frame : new Uint8Array(frame));
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
      if (!read.ok) return sendError(read.code, read.message, read.clientEventId, read.param);
      applyClientMessage(read.message, read.clientEventId, messageTarget);
    },
    /** A parsed client message (the OpenAI door's, translated). */
    onMessage(message: ClientMessage, clientEventId: string | null) {
      if (!closing) applyClientMessage(message, clientEventId, messageTarget);
    },
    /** Closes with `reason` (the OpenAI door's oversize text frame: 1009). */
    end: (reason: CloseReason) => close(reason),
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
      if (!gracefulDeadline) control({ kind: "end", flush: false });
      await detach(this as Session, code);
      await recordClosed(code, reason);
    },
    /**
     * Whether a lost connection holds the session for a resume rather than ending it:
     * the server did not decide the close (a close rule, a graceful close), and the
     * client was offered a credential.
     */
    get resumable() {
      return !closing && !gracefulDeadline && !closedDone && resumeOffered;
    },
    /**
     * The socket is gone and the session waits for a resume (resume.ts): the feed stops,
     * the audio so far is published and billed, the VAD keeps the session. `end` ends it
     * later as `closed` would have (grace over), `forget` lets it go (resumed elsewhere).
     */
    async hold(code: number): Promise<{ end(reason: string): Promise<void> }> {
      closedDone = true;
      await detach(this as Session, code);
      const lanes = publisher.lanes.map((lane) => ({ id: lane.id, partition: partitionOf(lane.id, deps.partitions) }));
      const closedAs = { session_id: sessionId, code, audio_ms: audioMs(), startedAt, lanes, firstSeq: (gen + 1) * SEQS_PER_CONNECTION - 1 };
      // not `deps` itself: its callbacks close over the gateway's socket and this session
      return { end: heldEnd(closedAs, { audio: deps.audio, sessions: deps.sessions, now: deps.now }, log) };
    },
    /** Another connection resumed this session: this one ends 4409 session_taken_over (the caller holds it first). */
    takenOver() {
      close(closeFor("taken_over"));
    },
    /** Held for a resume or taken over: the connection no longer drives the session. */
    get detached() {
      return closedDone;
    },
    get closeReason() {
      return closing;
    },
    stats() {
      return { audioMs: audioMs(), published: publisher.messagesPublished, pendingAcks: publisher.pendingAcks };
    },
  };
}
