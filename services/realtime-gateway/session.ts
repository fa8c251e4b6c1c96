import { JetStreamApiError } from "@nats-io/jetstream";
import type { Subscription } from "@nats-io/transport-node";
import { randomUUID } from "node:crypto";
import {
  CLOSE,
  clientMessage,
  INTERNAL_SAMPLE_RATE,
  DEFAULT_PARTIAL_INTERVAL_MS,
  turnDetection as turnDetectionSchema,
  type AudioControl,
  type CloseReason,
  type ServerEvent,
  type SessionCreated,
  type TurnDetection,
} from "../../schemas/realtime";
import { issueErrorCode } from "../../schemas/safe-string";
import { rtEventEnvelope, toServerEvent, type RtEvent } from "../../domain/sessions/events";
import type { SessionStore } from "../../domain/sessions/store";
import { createFrameAligner, createResampler } from "../../shared/audio/resample";
import type { Logger } from "../../shared/logger";
import { withSpanFromHeaders } from "../../shared/telemetry";
import { createSessionMetrics } from "./session-metrics";
import type { Nats } from "../../shared/nats";
import { recordUsage } from "../../shared/usage";
import type { Admission } from "./admit";
import type { AudioBatcher, AudioPublisher } from "./audio-publisher";

/**
 * One realtime connection from `open` to `close`: audio in (aligned, resampled to
 * 16 kHz mono, published to JetStream), client messages (parsed; bad ones answered
 * with an error event), session events out (a core NATS subscription on
 * rt.evt.<sessionId> — JetStream publishes reach core subscribers too), limits checked
 * on every frame and by the gateway's sweep, usage recorded every 30 s and at close.
 */
export interface SessionSocket {
  /** uWS semantics: 1 sent, 0 buffered (backpressure), 2 dropped. */
  send(text: string): number;
  bufferedAmount(): number;
  end(code: number, reason: string): void;
}

export interface SessionDeps {
  nats: Nats;
  /** The only writer of rt.evt: the session's opened and closed facts go through it. */
  sessions: SessionStore;
  logger: Logger;
  gatewayId: string;
  partitions: number;
  maxFrameBytes: number;
  /** The gateway's audio batches to JetStream (one per VAD partition per interval). */
  audio: AudioBatcher;
  /** How long a partition's batches in flight may stay over RT_MAX_PENDING_ACKS before 1013 upstream_backpressure. */
  backpressureGraceMs: number;
  maxClientBufferBytes: number;
  defaultTurnDetection: TurnDetection;
  /** Sessions are decoded while spoken (config realtime.streaming); shown in session.created. */
  streaming?: boolean;
  now: () => number;
  onClosed(session: Session): void;
}

const USAGE_EVERY_MS = 30_000;
/** Audio budget drawn per claim, and how far ahead of the audio the next claim starts. */
const BUDGET_SLICE_SECONDS = 5;
const BUDGET_LOOKAHEAD_MS = 3_000;
const GRACEFUL_CLOSE_WAIT_MS = 30_000;
const SEEN_EVENT_IDS = 1024;

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
export function refusedByStream(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.apiError().code < 500;
}

/**
 * One NATS outage, one close: while the gateway's NATS connection is down (or still
 * re-declaring after a reconnect), acks that stop draining and publishes that fail are
 * the outage itself, so they close 1013 upstream_unavailable like the gateway's sweep
 * does for every session once the outage has lasted NATS_OUTAGE_CLOSE_MS; with NATS
 * up they keep their own reasons (upstream_backpressure: JetStream is slow;
 * client_error: the stream refused the audio).
 */
export function upstreamCloseReason(cause: "backpressure" | "publish_failed" | "publish_refused", natsHealthy: boolean): CloseReason {
  if (!natsHealthy) return CLOSE.upstreamUnavailable;
  switch (cause) {
    case "backpressure":
      return CLOSE.upstreamBackpressure;
    case "publish_failed":
      return CLOSE.upstreamUnavailable;
    case "publish_refused":
      return CLOSE.clientError;
    default: {
      const never: never = cause;
      return never;
    }
  }
}

export type Session = ReturnType<typeof openSession>;

export function openSession(admission: Admission, socket: SessionSocket, deps: SessionDeps) {
  const { sessionId, principal, limits } = admission;
  const log = deps.logger.child({ sessionId, keyId: principal.keyId });
  const startedAt = deps.now();
  let lastAudioAt = startedAt;
  let inputFrames = 0; // per-channel frames at the client's rate
  const metrics = createSessionMetrics(deps.now);
  let usageRecordedMs = 0;
  let usageSeq = 0;
  // The live audio budget (shared/audio-budget.ts): audio up to allowanceMs is paid for.
  let allowanceMs = 0;
  let budgetExhausted = false;
  let claim: Promise<void> | null = null;
  let closing: CloseReason | null = null;
  let gracefulDeadline: number | null = null;
  let turnDetection = deps.defaultTurnDetection;
  let transcription = { language: admission.language, prompt: admission.prompt, model: null as string | null };
  let partials = { partial_interval_ms: DEFAULT_PARTIAL_INTERVAL_MS, interim_results: false, smart_format: true };
  const pendingItems = new Set<string>();
  let vadFlushed = false; // the VAD has committed everything after session.close
  let closedDone = false; // the socket is gone
  // Every accepted frame holds whole sample frames (a frame that does not is refused
  // below), so the aligner never carries a byte over: it only hands back a view.
  const bytesPerFrame = 2 * admission.channels;
  const aligner = createFrameAligner(bytesPerFrame);
  const resampler = createResampler(admission.sampleRate, INTERNAL_SAMPLE_RATE, admission.channels);
  const subjects = deps.nats.topology.subjects;

  const publisher: AudioPublisher = deps.audio.session({
    sessionId,
    partition: partitionOf(sessionId, deps.partitions),
    onFailure: (err) => {
      const refused = refusedByStream(err);
      log.warn(refused ? "audio refused by the stream" : "audio publish failed", { error: err instanceof Error ? err.message : String(err) });
      close(upstreamCloseReason(refused ? "publish_refused" : "publish_failed", deps.nats.health().ok));
    },
  });

  const send = (event: ServerEvent) => {
    if (closing || closedDone) return;
    metrics.sent(event, turnDetection.silence_duration_ms);
    const r = socket.send(JSON.stringify(event));
    if (r === 2 || socket.bufferedAmount() > deps.maxClientBufferBytes) close(CLOSE.clientBackpressure);
  };

  const sendError = (code: string, message: string, clientEventId: string | null = null, type: "invalid_request_error" | "server_error" = "invalid_request_error") =>
    send({ type: "error", event_id: `evt_${randomUUID()}`, error: { type, code, message, event_id: clientEventId } });

  const audioMs = () => Math.round((inputFrames * 1000) / admission.sampleRate);

  const appendLifecycle = (event: Extract<RtEvent, { type: "rt.session.opened" | "rt.session.closed" }>) =>
    (event.type === "rt.session.opened" ? deps.sessions.opened(event.data) : deps.sessions.closed(event.data)).catch((err) =>
      log.warn("could not record session event", { type: event.type, error: (err as Error).message }),
    );

  const flushUsage = async (final: boolean) => {
    const ms = audioMs() - usageRecordedMs;
    if (ms <= 0 && (!final || usageSeq > 0)) return;
    usageRecordedMs += ms;
    const n = usageSeq++;
    await recordUsage(deps.nats, {
      keyId: principal.keyId,
      ownerId: principal.ownerId,
      plane: "realtime",
      audioSeconds: ms / 1000,
      requests: n === 0 ? 1 : 0,
      subjectId: sessionId,
      usageId: `${sessionId}:usage:${n}`,
      at: new Date(deps.now()),
    }).catch((err) => log.warn("could not record usage", { error: (err as Error).message }));
  };

  // Session events from the VAD and the transcriber, forwarded as they arrive. A core
  // subscriber sees every publish, also those JetStream drops as duplicates (a retried
  // transcription, audio handled again after a VAD takeover): the msg ids seen recently
  // are remembered, so the client gets each event once.
  const seen = new Set<string>();
  const subscription: Subscription = deps.nats.nc.subscribe(subjects.rtEvent(sessionId), {
    callback: (err, msg) => {
      if (err) return;
      const msgId = msg.headers?.get("Nats-Msg-Id");
      if (msgId) {
        if (seen.has(msgId)) return;
        seen.add(msgId);
        if (seen.size > SEEN_EVENT_IDS) seen.delete(seen.values().next().value!);
      }
      let recorded: RtEvent;
      try {
        recorded = rtEventEnvelope.parse(msg.json());
      } catch {
        return;
      }
      if (recorded.type === "rt.session.flushed") {
        vadFlushed = true;
        if (gracefulDeadline && pendingItems.size === 0) finish(CLOSE.normal);
        return;
      }
      const event = toServerEvent(recorded);
      if (!event) return;
      if (event.type === "input_audio_buffer.committed") pendingItems.add(event.item_id);
      if (event.type === "conversation.item.input_audio_transcription.completed" || event.type === "conversation.item.input_audio_transcription.failed") {
        pendingItems.delete(event.item_id);
        // the utterance's last hop: its transcript to the socket, in the utterance's trace
        void withSpanFromHeaders("ws send transcript", msg.headers, async (span) => {
          span.setAttributes({ "session.id": sessionId, "item.id": event.item_id, "event.type": event.type });
          send(event);
        });
      } else send(event);
      if (gracefulDeadline && pendingItems.size === 0 && vadFlushed) finish(CLOSE.normal);
    },
  });

  const control = (message: AudioControl) => publisher.control(message);
  control({
    kind: "start",
    turn_detection: turnDetection,
    language: transcription.language,
    prompt: transcription.prompt,
    model: transcription.model,
    max_concurrent_utterances: limits.maxConcurrentUtterances,
    key_id: principal.keyId,
    owner_id: principal.ownerId,
    ...partials,
  });
  void appendLifecycle({
    type: "rt.session.opened",
    data: {
      session_id: sessionId,
      request_id: admission.requestId,
      key_id: principal.keyId,
      owner_id: principal.ownerId,
      plan: principal.plan,
      gateway_id: deps.gatewayId,
      sample_rate: admission.sampleRate,
      channels: admission.channels,
    },
  });

  const created: SessionCreated = {
    type: "session.created",
    request_id: admission.requestId,
    session_id: sessionId,
    audio: { format: "pcm_s16le", sample_rate: admission.sampleRate, channels: admission.channels },
    turn_detection: turnDetection,
    plan: principal.plan,
    limits: {
      max_concurrent_utterances: limits.maxConcurrentUtterances,
      max_session_seconds: limits.maxSessionSeconds,
      idle_timeout_seconds: limits.idleTimeoutSeconds,
      remaining_audio_seconds: admission.remainingAudioSeconds,
    },
    input_audio_transcription: { streaming: deps.streaming ?? false, ...partials },
  };
  send(created);
  // after the gateway has registered the session (a close inside `open` would skip cleanup)
  if (admission.remainingAudioSeconds <= 0) setImmediate(() => close(CLOSE.audioQuotaExhausted));
  else topUpBudget();

  /**
   * Draws the next slice of the key's window budget before the audio needs it, so every
   * session and plane of the key shares one live budget. A partial grant means the
   * window is used up: the session closes 1008 when its audio passes what was granted.
   * If the budget cannot be reached (NATS away), the slice is granted anyway (fail open,
   * logged): billing still follows the usage events.
   */
  function topUpBudget() {
    if (claim || budgetExhausted || closedDone) return;
    if (allowanceMs - audioMs() > BUDGET_LOOKAHEAD_MS) return;
    claim = admission.budget
      .claim(BUDGET_SLICE_SECONDS, { partial: true })
      .then(
        (granted) => {
          allowanceMs += granted * 1000;
          if (granted < BUDGET_SLICE_SECONDS) budgetExhausted = true;
        },
        (err) => {
          log.warn("audio budget unavailable; granting the slice", { error: (err as Error).message });
          allowanceMs += BUDGET_SLICE_SECONDS * 1000;
        },
      )
      .finally(() => {
        claim = null;
        if (budgetExhausted && audioMs() > allowanceMs) close(CLOSE.audioQuotaExhausted);
        else topUpBudget();
      });
  }

  /** Ends the socket with a close code; cleanup happens in `closed`. */
  function close(reason: CloseReason) {
    if (closing) return;
    closing = reason;
    socket.end(reason.code, reason.reason);
  }

  function finish(reason: CloseReason) {
    gracefulDeadline = null;
    close(reason);
  }

  return {
    id: sessionId,
    keyId: principal.keyId,
    admission,
    /** A binary frame: PCM16LE at the session's rate and channel count. */
    onAudio(frame: ArrayBuffer) {
      if (closing) return;
      if (frame.byteLength > deps.maxFrameBytes) return close(CLOSE.frameTooLarge);
      // A frame cut inside a sample would shift every later sample by a byte (noise the
      // VAD never hears as speech, with nothing said): it is dropped whole and answered,
      // and the next well-formed frame carries on where the last accepted one ended.
      if (frame.byteLength % bytesPerFrame !== 0) {
        return sendError(
          "invalid_audio_frame",
          `Binary frame of ${frame.byteLength} bytes dropped: each frame must hold whole samples, a multiple of ${bytesPerFrame} bytes (PCM16LE, ${admission.channels} channel${admission.channels === 1 ? "" : "s"}).`,
        );
      }
      lastAudioAt = deps.now();
      const samples = aligner.push(new Uint8Array(frame));
      inputFrames += samples.length / admission.channels;
      metrics.audio(frame.byteLength, audioMs());
      if (audioMs() > limits.maxAudioSecondsPerSession * 1000) return close(CLOSE.sessionAudioLimit);
      if (budgetExhausted && audioMs() > allowanceMs) return close(CLOSE.audioQuotaExhausted);
      topUpBudget();
      if (gracefulDeadline) return; // after session.close, audio is ignored
      publisher.pushAudio(resampler.push(samples));
      if (publisher.overloadedForMs(deps.now()) > deps.backpressureGraceMs) close(upstreamCloseReason("backpressure", deps.nats.health().ok));
    },
    /** A text frame: one JSON client message. */
    onText(frame: ArrayBuffer) {
      if (closing) return;
      if (frame.byteLength > deps.maxFrameBytes) return close(CLOSE.frameTooLarge);
      let raw: unknown;
      try {
        raw = JSON.parse(Buffer.from(frame).toString("utf8"));
      } catch {
        return sendError("invalid_json", "Text frames must be JSON objects with a 'type' field; audio goes in binary frames.");
      }
      const clientEventId = typeof (raw as { event_id?: unknown })?.event_id === "string" ? String((raw as { event_id: string }).event_id).slice(0, 128) : null;
      const parsed = clientMessage.safeParse(raw);
      if (!parsed.success) {
        const type = (raw as { type?: unknown })?.type;
        const known = ["input_audio_buffer.commit", "input_audio_buffer.clear", "session.update", "session.close"];
        if (typeof type !== "string" || !known.includes(type)) {
          return sendError("unknown_event_type", `Unknown client event type ${JSON.stringify(type ?? null)}; expected one of ${known.join(", ")}.`, clientEventId);
        }
        const issue = parsed.error.issues[0];
        // An unstorable string (NUL, lone surrogate) is `invalid_string`, as on the HTTP routes.
        return sendError(issueErrorCode(issue, "invalid_event"), `Invalid ${type}: ${issue?.path.join(".") || "event"}: ${issue?.message ?? "invalid"}.`, clientEventId);
      }
      const message = parsed.data;
      switch (message.type) {
        case "input_audio_buffer.commit":
          control({ kind: "commit", event_id: clientEventId });
          return;
        case "input_audio_buffer.clear":
          control({ kind: "clear", event_id: clientEventId });
          return;
        case "session.update": {
          const td = message.session.turn_detection;
          const next = turnDetectionSchema.safeParse({ ...turnDetection, ...td, type: "server_vad" });
          if (!next.success) return sendError("invalid_event", "Invalid turn_detection settings.", clientEventId);
          turnDetection = next.data;
          const t = message.session.input_audio_transcription;
          if (t) transcription = { language: t.language ?? transcription.language, prompt: t.prompt ?? transcription.prompt, model: t.model ?? transcription.model };
          if (t)
            partials = {
              partial_interval_ms: t.partial_interval_ms ?? partials.partial_interval_ms,
              interim_results: t.interim_results ?? partials.interim_results,
              smart_format: t.smart_format ?? partials.smart_format,
            };
          control({ kind: "update", turn_detection: turnDetection, ...transcription, ...partials });
          send({
            type: "session.updated",
            event_id: `evt_${randomUUID()}`,
            session: { turn_detection: turnDetection, input_audio_transcription: { ...transcription, ...partials } },
          });
          return;
        }
        case "session.close":
          // Flush the open utterance, wait (bounded) for its transcript, then close 1000.
          gracefulDeadline = deps.now() + GRACEFUL_CLOSE_WAIT_MS;
          // The VAD answers with committed (if speech was open) and then rt.session.flushed;
          // the socket closes once that has arrived and every committed item has its result.
          control({ kind: "end", flush: true });
          publisher.flush();
          return;
        default: {
          const never: never = message;
          return never;
        }
      }
    },
    /** The session's key was revoked (on any gateway): close 1008 key_revoked now. */
    revoke() {
      close(CLOSE.keyRevoked);
    },
    /** Called by the gateway's sweep (every 250 ms); `upstreamAvailable` false (workers' breaker open, NATS down too long) closes 1013. */
    tick(now: number, upstreamAvailable: boolean) {
      metrics.flush();
      if (closing) return;
      if (gracefulDeadline) {
        if (now >= gracefulDeadline) finish(CLOSE.normal);
        return;
      }
      if (!upstreamAvailable) return close(CLOSE.upstreamUnavailable);
      if (now - startedAt > limits.maxSessionSeconds * 1000) return close(CLOSE.sessionDurationLimit);
      if (now - lastAudioAt > limits.idleTimeoutSeconds * 1000) return close(CLOSE.idleTimeout);
      if (socket.bufferedAmount() > deps.maxClientBufferBytes) return close(CLOSE.clientBackpressure);
      if (publisher.overloadedForMs(now) > deps.backpressureGraceMs) return close(upstreamCloseReason("backpressure", deps.nats.health().ok));
      publisher.flush(); // never hold a partial 100 ms message longer than a sweep
      if (now - startedAt - usageRecordedMs > USAGE_EVERY_MS && audioMs() - usageRecordedMs > 0) void flushUsage(false);
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
      await flushUsage(true);
      // give back the budget granted ahead of audio that never came
      await claim;
      const unused = Math.max(0, allowanceMs - audioMs()) / 1000;
      await admission.budget.release(unused).catch((err) => log.warn("could not release unused audio budget", { error: (err as Error).message }));
      await appendLifecycle({
        type: "rt.session.closed",
        data: { session_id: sessionId, code, reason, audio_ms: audioMs(), duration_ms: Math.max(0, deps.now() - startedAt) },
      });
    },
    get closeReason() {
      return closing;
    },
    stats() {
      return { audioMs: audioMs(), published: publisher.messagesPublished, pendingAcks: publisher.pendingAcks };
    },
  };
}
