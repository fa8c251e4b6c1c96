import type { RedactEntity } from "../../schemas/redact";
import { clientMessage, turnDetection as turnDetectionSchema, type ClientMessage, type SessionUpdate, type TurnDetection } from "../../schemas/realtime";
import { issueErrorCode } from "../../schemas/safe-string";

/**
 * A session's text frames: each one JSON client message, parsed at the edge; what does
 * not parse is answered with an `error` event (the session goes on).
 */
export type ClientFrame =
  | { ok: true; message: ClientMessage; clientEventId: string | null }
  | { ok: false; code: string; message: string; clientEventId: string | null };

const KNOWN_TYPES = ["input_audio_buffer.commit", "input_audio_buffer.clear", "session.update", "session.close"];

export function readClientFrame(frame: ArrayBuffer): ClientFrame {
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(frame).toString("utf8"));
  } catch {
    return { ok: false, code: "invalid_json", message: "Text frames must be JSON objects with a 'type' field; audio goes in binary frames.", clientEventId: null };
  }
  const clientEventId = typeof (raw as { event_id?: unknown })?.event_id === "string" ? String((raw as { event_id: string }).event_id).slice(0, 128) : null;
  const parsed = clientMessage.safeParse(raw);
  if (parsed.success) return { ok: true, message: parsed.data, clientEventId };
  const type = (raw as { type?: unknown })?.type;
  if (typeof type !== "string" || !KNOWN_TYPES.includes(type)) {
    return { ok: false, code: "unknown_event_type", message: `Unknown client event type ${JSON.stringify(type ?? null)}; expected one of ${KNOWN_TYPES.join(", ")}.`, clientEventId };
  }
  const issue = parsed.error.issues[0];
  // An unstorable string (NUL, lone surrogate) is `invalid_string`, as on the HTTP routes.
  return { ok: false, code: issueErrorCode(issue, "invalid_event"), message: `Invalid ${type}: ${issue?.path.join(".") || "event"}: ${issue?.message ?? "invalid"}.`, clientEventId };
}

/** What a client may change with session.update, as the session holds it. */
export interface SessionSettings {
  turnDetection: TurnDetection;
  transcription: { language: string | null; prompt: string | null; model: string | null };
  /** The streaming and shaping settings (`redact`: entities redacted, absent for none). */
  partials: { partial_interval_ms: number; interim_results: boolean; smart_format: boolean; redact?: RedactEntity[] };
}

/** The settings after a session.update (fields not given are kept); null when the turn detection it makes is invalid. */
export function updateSettings(current: SessionSettings, update: SessionUpdate["session"]): SessionSettings | null {
  const next = turnDetectionSchema.safeParse({ ...current.turnDetection, ...update.turn_detection, type: "server_vad" });
  if (!next.success) return null;
  const t = update.input_audio_transcription;
  if (!t) return { ...current, turnDetection: next.data };
  const { transcription, partials } = current;
  return {
    turnDetection: next.data,
    transcription: { language: t.language ?? transcription.language, prompt: t.prompt ?? transcription.prompt, model: t.model ?? transcription.model },
    partials: {
      partial_interval_ms: t.partial_interval_ms ?? partials.partial_interval_ms,
      interim_results: t.interim_results ?? partials.interim_results,
      smart_format: t.smart_format ?? partials.smart_format,
      redact: t.redact ?? partials.redact,
    },
  };
}
