import type { RedactEntity } from "../../schemas/redact";
import { clientMessage, DEFAULT_PARTIAL_INTERVAL_MS, turnDetection as turnDetectionSchema, type ClientMessage, type ServerEvent, type SessionUpdate, type TurnDetection } from "../../schemas/realtime";
import { type AudioControl } from "../../schemas/realtime-internal";
import { issueErrorCode } from "../../schemas/safe-string";

/**
 * A session's text frames: each one JSON client message, parsed at the edge; what does
 * not parse is answered with an `error` event (the session goes on).
 */
export type ClientFrame =
  | { ok: true; message: ClientMessage; clientEventId: string | null }
  | { ok: false; code: string; message: string; clientEventId: string | null; param?: string };

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
  const param = issue?.path.length ? issue.path.join(".") : undefined;
  return { ok: false, code: issueErrorCode(issue, "invalid_event"), message: `Invalid ${type}: ${param || "event"}: ${issue?.message ?? "invalid"}.`, clientEventId, ...(param ? { param } : {}) };
}

/** Why a binary frame was dropped, in the `error` event's words: audio before session.resumed, or a frame cut inside a sample (`channels`: the session's). */
export function audioFrameRefusal(code: "invalid_audio_frame" | "resume_in_progress", bytes: number, channels: number): string {
  if (code === "resume_in_progress") return "Audio before session.resumed is dropped: wait for it, then send audio from its audio_ms on.";
  return `Binary frame of ${bytes} bytes dropped: each frame must hold whole samples, a multiple of ${2 * channels} bytes (PCM16LE, ${channels} channel${channels === 1 ? "" : "s"}).`;
}

/** What a client may change with session.update, as the session holds it. */
export interface SessionSettings {
  turnDetection: TurnDetection;
  /** `keyterms`: absent for none. */
  transcription: { language: string | null; prompt: string | null; model: string | null; keyterms?: string[] };
  /** The streaming and shaping settings (`redact`: entities redacted, absent for none). */
  partials: { partial_interval_ms: number; interim_results: boolean; smart_format: boolean; redact?: RedactEntity[]; diarize?: boolean; speakers?: number; max_speakers?: number; speaker_roles?: Record<string, string> };
}

/** A session's settings before any session.update: the gateway's turn detection, the upgrade's language, prompt and keyterms. */
export function initialSettings(upgrade: { language: string | null; prompt: string | null; keyterms?: string[] }, turnDetection: TurnDetection): SessionSettings {
  return {
    turnDetection,
    transcription: { language: upgrade.language, prompt: upgrade.prompt, model: null, ...(upgrade.keyterms ? { keyterms: upgrade.keyterms } : {}) },
    partials: { partial_interval_ms: DEFAULT_PARTIAL_INTERVAL_MS, interim_results: false, smart_format: true },
  };
}

export type SettingsUpdate = { ok: true; settings: SessionSettings } | { ok: false; code: string; message: string };

/**
 * The settings after a session.update (fields not given are kept), or why it is refused:
 * a turn detection that is invalid, or `semantic_vad` where the engine cannot stream
 * (it needs the running hypothesis; the session keeps what it had).
 */
export function updateSettings(current: SessionSettings, update: SessionUpdate["session"], streaming: boolean): SettingsUpdate {
  const next = turnDetectionSchema.safeParse(normalTurnDetection({ ...current.turnDetection, ...update.turn_detection }));
  if (!next.success) return { ok: false, code: "invalid_event", message: "Invalid turn_detection settings." };
  if (next.data.type === "semantic_vad" && !streaming) {
    return { ok: false, code: "semantic_vad_unavailable", message: "turn_detection.type semantic_vad needs a streaming engine; this server's engine cannot stream, so the session keeps server_vad (see turn_detection_types in session.created)." };
  }
  const t = update.input_audio_transcription;
  if (!t) return { ok: true, settings: { ...current, turnDetection: next.data } };
  const { transcription, partials } = current;
  const diarize = t.diarize ?? partials.diarize ?? false;
  const speakers = t.speakers ?? (t.max_speakers === undefined ? partials.speakers : undefined);
  const maxSpeakers = t.max_speakers ?? (t.speakers === undefined ? partials.max_speakers : undefined);
  if ((speakers !== undefined || maxSpeakers !== undefined) && !diarize) return { ok: false, code: "invalid_event", message: "input_audio_transcription.speakers and max_speakers need diarize: true." };
  if (speakers !== undefined && maxSpeakers !== undefined) return { ok: false, code: "invalid_event", message: "input_audio_transcription: give speakers (exactly) or max_speakers (at most), not both." };
  return {
    ok: true,
    settings: {
      turnDetection: next.data,
      transcription: {
        language: t.language ?? transcription.language,
        prompt: t.prompt ?? transcription.prompt,
        model: t.model ?? transcription.model,
        ...((t.keyterms ?? transcription.keyterms) ? { keyterms: t.keyterms ?? transcription.keyterms } : {}),
      },
      partials: {
        partial_interval_ms: t.partial_interval_ms ?? partials.partial_interval_ms,
        interim_results: t.interim_results ?? partials.interim_results,
        smart_format: t.smart_format ?? partials.smart_format,
        redact: t.redact ?? partials.redact,
        ...(diarize ? { diarize, ...(speakers ? { speakers } : {}), ...(maxSpeakers ? { max_speakers: maxSpeakers } : {}), ...((t.speaker_roles ?? partials.speaker_roles) ? { speaker_roles: t.speaker_roles ?? partials.speaker_roles } : {}) } : {}),
      },
    },
  };
}

/** semantic_vad shows its eagerness (`auto` unless given) and whether early events are on; server_vad has neither. */
function normalTurnDetection(t: Partial<TurnDetection>): Partial<TurnDetection> {
  const { eagerness, early_turn_events, ...rest } = t;
  if (t.type !== "semantic_vad") return rest;
  return { ...rest, eagerness: eagerness ?? "auto", early_turn_events: early_turn_events ?? false };
}

/** What a client message acts on. */
export interface MessageTarget {
  /** The engine decodes while spoken (semantic_vad needs it). */
  streaming: boolean;
  settings(): SessionSettings;
  changeSettings(next: SessionSettings): void;
  control(message: AudioControl): void;
  send(event: ServerEvent): void;
  sendError(code: string, message: string, clientEventId: string | null): void;
  /** The id of an event the gateway sends itself (session-feed.ts directEventId). */
  newEventId(): string;
  /** session.close: flush, wait for the transcripts, then 1000. */
  closeGracefully(): void;
}

/** One client message: a control to the VAD, a settings change answered, or a graceful close. */
export function applyClientMessage(message: ClientMessage, clientEventId: string | null, to: MessageTarget): void {
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
        event_id: to.newEventId(),
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
