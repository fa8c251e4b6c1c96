import type { BetaSessionView, OpenAiNoiseReduction, OpenAiSessionUpdate, OpenAiSessionView, OpenAiTranscription, OpenAiTranscriptionSessionUpdate } from "../../schemas/openai-realtime";
import { LOGPROBS_INCLUDE } from "../../schemas/openai-realtime";
import { DEFAULT_PARTIAL_INTERVAL_MS, type SessionUpdate, type TurnDetection } from "../../schemas/realtime";

/**
 * An OpenAI Realtime transcription session's configuration as the door holds it, the
 * updates GA and beta clients send (pure: a rejected update changes nothing), its two
 * views (GA `session`, beta flat fields), and the native settings it comes down to.
 *
 * How OpenAI's turn detection maps onto our VAD (docs/realtime-openai.md):
 * - `server_vad.threshold` (OpenAI: activation level 0..1, default 0.5) becomes our start
 *   threshold, the fraction of voiced 30 ms frames in the last 300 ms (WebRTC VAD), at
 *   least 0.1; `prefix_padding_ms` is ours (at most 2000); `silence_duration_ms` is ours
 *   (100..5000). The views show the values in effect.
 * - `semantic_vad.eagerness` is our semantic_vad's eagerness (domain/sessions/end-of-turn.ts).
 * - `null`: our `manual` type, no voice detection; the audio since the last commit is
 *   the item (the VAD's segmenter holds it), a commit ends it.
 */
type DoorFormat = "pcm" | "pcmu" | "pcma";

type DoorTurnDetection =
  | { type: "server_vad"; threshold: number; prefix_padding_ms: number; silence_duration_ms: number }
  | { type: "semantic_vad"; eagerness: "low" | "medium" | "high" | "auto" }
  | null;

export interface DoorConfig {
  format: DoorFormat;
  /** null: no transcription events (the VAD still commits items). */
  transcription: OpenAiTranscription;
  turnDetection: DoorTurnDetection;
  /** Accepted and shown; our pipeline has no noise reduction stage, so it changes nothing. */
  noiseReduction: OpenAiNoiseReduction;
  include: (typeof LOGPROBS_INCLUDE)[] | null;
}

interface DoorConfigError {
  code: string;
  message: string;
  param: string | null;
}
export type DoorConfigUpdate = { ok: true; config: DoorConfig } | { ok: false; error: DoorConfigError };

/** A manual item is cut into consecutive items past this (the VAD's longest utterance). */
const MANUAL_MAX_ITEM_MS = 30_000;

const clamp = (v: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, v));

/** The native VAD's server_vad settings an OpenAI server_vad comes to (values in effect). */
function serverVad(t: { threshold?: number; prefix_padding_ms?: number; silence_duration_ms?: number }, vad: TurnDetection): DoorTurnDetection {
  return {
    type: "server_vad",
    threshold: clamp(t.threshold ?? vad.threshold, 0.1, 1),
    prefix_padding_ms: clamp(t.prefix_padding_ms ?? vad.prefix_padding_ms, 0, 2000),
    silence_duration_ms: clamp(t.silence_duration_ms ?? vad.silence_duration_ms, 100, 5000),
  };
}

/** An OpenAI turn_detection (GA or beta: the same fields) in effect here: null (manual commit), semantic_vad, or server_vad on our VAD. */
function turnDetectionOf(
  t: null | ({ type?: "server_vad" | "semantic_vad"; eagerness?: "low" | "medium" | "high" | "auto" } & Parameters<typeof serverVad>[0]),
  vad: TurnDetection,
): DoorTurnDetection {
  return t === null ? null : t.type === "semantic_vad" ? { type: "semantic_vad", eagerness: t.eagerness ?? "auto" } : serverVad(t, vad);
}

/** A session's start: our VAD's defaults, transcription with the model named in the URL (if any). */
export function defaultDoorConfig(vad: TurnDetection, model: string | null, language: string | null): DoorConfig {
  const transcription: NonNullable<OpenAiTranscription> = {};
  if (model) transcription.model = model;
  if (language) transcription.language = language;
  return { format: "pcm", transcription, turnDetection: serverVad({}, vad), noiseReduction: null, include: null };
}

const FORMAT_OF = { "audio/pcm": "pcm", "audio/pcmu": "pcmu", "audio/pcma": "pcma" } as const;
const BETA_FORMAT_OF = { pcm16: "pcm", g711_ulaw: "pcmu", g711_alaw: "pcma" } as const;

/** GA `session.update`: only the fields present change; a `session.type` other than `transcription` is refused. */
export function applySessionUpdate(config: DoorConfig, session: OpenAiSessionUpdate["session"], vad: TurnDetection): DoorConfigUpdate {
  if (session.type !== "transcription") {
    return {
      ok: false,
      error: {
        code: "invalid_value",
        message: `This endpoint serves transcription sessions only: session.type must be 'transcription', not ${JSON.stringify(session.type)} (a conversation session is not available here).`,
        param: "session.type",
      },
    };
  }
  const input = session.audio?.input ?? {};
  const next = { ...config };
  if (input.format) next.format = FORMAT_OF[input.format.type];
  if (input.transcription !== undefined) next.transcription = input.transcription;
  if (input.turn_detection !== undefined) next.turnDetection = turnDetectionOf(input.turn_detection, vad);
  if (input.noise_reduction !== undefined) next.noiseReduction = input.noise_reduction;
  if (session.include !== undefined) next.include = session.include;
  return { ok: true, config: next };
}

/** Beta `transcription_session.update`: the same, with flat fields. */
export function applyBetaUpdate(config: DoorConfig, session: OpenAiTranscriptionSessionUpdate["session"], vad: TurnDetection): DoorConfigUpdate {
  if (session.modalities && session.modalities.some((m) => m !== "text")) {
    return { ok: false, error: { code: "invalid_value", message: "A transcription session produces text only: modalities must be ['text'].", param: "session.modalities" } };
  }
  const next = { ...config };
  if (session.input_audio_format) next.format = BETA_FORMAT_OF[session.input_audio_format];
  if (session.input_audio_transcription !== undefined) next.transcription = session.input_audio_transcription;
  if (session.turn_detection !== undefined) next.turnDetection = turnDetectionOf(session.turn_detection, vad);
  if (session.input_audio_noise_reduction !== undefined) next.noiseReduction = session.input_audio_noise_reduction;
  if (session.include !== undefined) next.include = session.include;
  return { ok: true, config: next };
}

/** The native session.update the configuration comes to (the whole of it: a native update merges). */
export function nativeSettings(config: DoorConfig, vad: TurnDetection): SessionUpdate["session"] {
  const t = config.turnDetection;
  const base = { threshold: vad.threshold, prefix_padding_ms: vad.prefix_padding_ms, silence_duration_ms: vad.silence_duration_ms, aggressiveness: vad.aggressiveness, max_utterance_ms: vad.max_utterance_ms };
  const turn_detection: Partial<TurnDetection> =
    t === null
      ? { ...base, type: "manual", prefix_padding_ms: 0, max_utterance_ms: MANUAL_MAX_ITEM_MS }
      : t.type === "semantic_vad"
        ? { ...base, type: "semantic_vad", eagerness: t.eagerness }
        : { ...base, ...t };
  const tr = config.transcription ?? {};
  const language = tr.language ?? tr.languages?.[0];
  const delay = tr.delay ? DELAY[tr.delay] : undefined;
  if (delay && turn_detection.type === "semantic_vad" && turn_detection.eagerness === "auto") turn_detection.eagerness = delay.eagerness;
  return {
    turn_detection,
    input_audio_transcription: {
      ...(tr.model ? { model: tr.model } : {}),
      ...(language ? { language } : {}),
      ...(tr.prompt ? { prompt: tr.prompt } : {}),
      keyterms: tr.keywords ?? [],
      partial_interval_ms: delay?.partialIntervalMs ?? DEFAULT_PARTIAL_INTERVAL_MS,
      // the extension as given, for the native session to judge as it judges its own
      // (a count without diarize is refused there); `diarize: false` turns it off again
      ...(tr.diarize !== undefined ? { diarize: tr.diarize } : {}),
      ...(tr.speakers !== undefined ? { speakers: tr.speakers } : {}),
      ...(tr.max_speakers !== undefined ? { max_speakers: tr.max_speakers } : {}),
      ...(tr.speaker_roles !== undefined ? { speaker_roles: tr.speaker_roles } : {}),
    },
  };
}

/**
 * OpenAI's `delay` (how far transcripts may lag behind speech) on our settings: the
 * streaming decoder's partial interval (deltas every this many ms of new speech), and,
 * under semantic_vad with eagerness `auto`, the eagerness (a short delay ends turns
 * sooner). Absent: the native defaults (300 ms, `auto`). docs/realtime.md.
 */
const DELAY = {
  minimal: { partialIntervalMs: 100, eagerness: "high" },
  low: { partialIntervalMs: 200, eagerness: "high" },
  medium: { partialIntervalMs: 300, eagerness: "auto" },
  high: { partialIntervalMs: 600, eagerness: "low" },
  xhigh: { partialIntervalMs: 1000, eagerness: "low" },
} as const satisfies Record<NonNullable<NonNullable<OpenAiTranscription>["delay"]>, { partialIntervalMs: number; eagerness: "low" | "medium" | "high" | "auto" }>;

export const wantsLogprobs = (config: DoorConfig) => config.include?.includes(LOGPROBS_INCLUDE) ?? false;

/** The GA session object (`session.created` / `session.updated`). */
export function gaView(config: DoorConfig, id: string, expiresAt: number): OpenAiSessionView {
  const format = config.format === "pcm" ? ({ type: "audio/pcm", rate: 24000 } as const) : ({ type: `audio/${config.format}` } as const);
  return {
    type: "transcription",
    object: "realtime.transcription_session",
    id,
    expires_at: expiresAt,
    audio: { input: { format, transcription: config.transcription, turn_detection: config.turnDetection, noise_reduction: config.noiseReduction } },
    include: config.include,
  };
}

/** The beta session object (`transcription_session.created` / `.updated`). */
export function betaView(config: DoorConfig, id: string, expiresAt: number): BetaSessionView {
  const format = ({ pcm: "pcm16", pcmu: "g711_ulaw", pcma: "g711_alaw" } as const)[config.format];
  return {
    id,
    object: "realtime.transcription_session",
    expires_at: expiresAt,
    input_audio_format: format,
    input_audio_transcription: config.transcription,
    turn_detection: config.turnDetection,
    input_audio_noise_reduction: config.noiseReduction,
    include: config.include,
    client_secret: null,
  };
}
