import type { SessionCreated } from "../../schemas/realtime";
import type { AudioControl } from "../../schemas/realtime-internal";
import type { SessionStore } from "../../domain/sessions/store";
import type { Logger } from "../../shared/logger";
import type { Admission } from "./admit";
import type { SessionSettings } from "./client-messages";
import type { AudioBatcher } from "./audio-publisher";

/** A session's start (session.ts): what the VAD and rt.evt are told, and what the client is; and a held session's end. */

/** The session's start: its settings to the VAD (in-band, before any audio) and its opened fact to rt.evt. */
export function announce(admission: Admission, deps: { sessions: SessionStore; gatewayId: string }, settings: SessionSettings, control: (message: AudioControl) => void, log: Logger) {
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

/** session.created, exactly the fields of spec 6.1 (plus the VAD and streaming settings). */
export function sessionCreated(admission: Admission, settings: SessionSettings, streaming: boolean): SessionCreated {
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
    turn_detection_types: streaming ? ["server_vad", "semantic_vad", "manual"] : ["server_vad", "manual"],
  };
}

/** What ending a held session needs (nothing of the connection). */
interface HeldDeps {
  audio: AudioBatcher;
  sessions: SessionStore;
  now: () => number;
}

/**
 * Ends a held session whose grace passed: the VAD's end control to each of its lanes
 * (through publishers of its own, numbered after the connection's entries) and the
 * closed fact. Built from
 * plain values, so a held session keeps none of its connection's state alive (a
 * closure of openSession would keep all of it: V8 shares one context per scope).
 */
export function heldEnd(s: Parameters<typeof endHeld>[0], deps: HeldDeps, log: Logger) {
  return (reason: string) => endHeld(s, reason, deps, log);
}

async function endHeld(
  s: { session_id: string; code: number; audio_ms: number; startedAt: number; lanes: { id: string; partition: number }[]; firstSeq: number },
  reason: string,
  deps: HeldDeps,
  log: Logger,
): Promise<void> {
  const publishers = s.lanes.map((lane) => deps.audio.session({ sessionId: lane.id, partition: lane.partition, firstSeq: s.firstSeq, onFailure: () => undefined }));
  for (const p of publishers) p.control({ kind: "end", flush: false });
  await Promise.all(publishers.map((p) => p.settled()));
  await deps.sessions
    .closed({ session_id: s.session_id, code: s.code, reason, audio_ms: s.audio_ms, duration_ms: Math.max(0, deps.now() - s.startedAt) })
    .catch((err) => log.warn("could not record session event", { type: "rt.session.closed", error: (err as Error).message }));
}
