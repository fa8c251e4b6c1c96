import type { z } from "zod";
import { CONVERSATION_EVENT_TYPES, OPENAI_CLIENT_EVENT_TYPES, openAiClientEvent, type OpenAiClientEvent, type OpenAiErrorBody, type OpenAiLogprob, type OpenAiServerEvent } from "../../schemas/openai-realtime";
import type { ServerEvent, ServerEventOf } from "../../schemas/realtime";
import { betaView, gaView, wantsLogprobs, type DoorConfig } from "./openai-config";

/**
 * The OpenAI door's two translations, pure apart from the door's own small state:
 * a text frame → an OpenAI client event (or OpenAI's `error` body), and a native server
 * event → the OpenAI server events it stands for, in OpenAI's shapes and order.
 *
 * - `committed` → `committed` + `conversation.item.added` + `conversation.item.done`
 *   (beta: `conversation.item.created`).
 * - Deltas are the native streamed deltas, append-only already (domain/transcript/
 *   item-transcript.ts: a word is sent once the decoder stops revising it, and the final
 *   `completed` may differ from the deltas' concatenation, as OpenAI's may). Manual
 *   commit: OpenAI clients learn an item at `committed`, so its deltas are held until then.
 * - Exactly one `completed` or `failed` per item, whatever the native feed repeats.
 * - Native extensions (interims, early turn events) and, in manual mode, the VAD's
 *   speech_started / speech_stopped (OpenAI sends none there) are not sent; the live
 *   speaker labels' (`speaker`, `speaker_role`, `conversation.speaker.merged`) are, as
 *   extensions an OpenAI client ignores.
 * - With `include: ["item.input_audio_transcription.logprobs"]`, `completed` carries one
 *   token per word: `logprob` = ln of the engine's word confidence (PocketSphinx: the
 *   word's posterior probability in the decoding lattice, ps_seg_prob); a word without
 *   one counts as certain (0).
 */
export interface DoorState {
  /** Beta shapes (OpenAI-Beta header, beta subprotocol, or a beta event seen). */
  beta: boolean;
  config: DoorConfig;
  /** An update the native session is deciding on: restored if it answers `error`. */
  updating: { previous: DoorConfig } | null;
  /** Items the client has been told are committed (recent ones). */
  committed: Set<string>;
  /** Manual mode: deltas of items not committed yet. */
  held: Map<string, string[]>;
  /** Items whose completed or failed went out (recent ones). */
  finished: Set<string>;
}

export interface TranslateContext {
  eventId(): string;
  sessionId: string;
  /** Epoch seconds: when the session ends at the latest (its plan's max_session_seconds). */
  expiresAt: number;
}

const RECENT_ITEMS = 256;

export function newDoorState(config: DoorConfig, beta: boolean): DoorState {
  return { beta, config, updating: null, committed: new Set(), held: new Map(), finished: new Set() };
}

function remember(set: Set<string>, id: string) {
  set.add(id);
  if (set.size > RECENT_ITEMS) set.delete(set.values().next().value!);
}

// ---------------------------------------------------------------- client frames

export type OpenAiFrame = { ok: true; event: OpenAiClientEvent; clientEventId: string | null } | { ok: false; error: OpenAiErrorBody };

const invalid = (code: string, message: string, param: string | null, clientEventId: string | null): OpenAiFrame => ({
  ok: false,
  error: { type: "invalid_request_error", code, message, param, event_id: clientEventId },
});

/** OpenAI's error code for a zod issue (the codes its live server answers with). */
function issueCode(issue: z.core.$ZodIssue | undefined): string {
  switch (issue?.code) {
    case "too_small":
      return issue.origin === "number" ? (Number.isInteger(issue.minimum) ? "integer_below_min_value" : "decimal_below_min_value") : "string_below_min_length";
    case "too_big":
      return issue.origin === "number" ? (Number.isInteger(issue.maximum) ? "integer_above_max_value" : "decimal_above_max_value") : "string_above_max_length";
    case "invalid_type":
      return issue.input === undefined ? "missing_required_parameter" : "invalid_type";
    default:
      return "invalid_value";
  }
}

/** One text frame: its JSON client event, or OpenAI's error body (the connection goes on). */
export function readOpenAiFrame(text: string): OpenAiFrame {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return invalid("invalid_json", "The client event could not be parsed as JSON.", null, null);
  }
  const obj = raw !== null && typeof raw === "object" ? (raw as Record<string, unknown>) : {};
  const clientEventId = typeof obj.event_id === "string" ? obj.event_id.slice(0, 128) : null;
  const type = obj.type;
  if (typeof type !== "string") return invalid("missing_required_parameter", "Missing required parameter: 'type'.", "type", clientEventId);
  if (CONVERSATION_EVENT_TYPES.includes(type)) {
    return invalid("invalid_value", `'${type}' is not available in a transcription session.`, "type", clientEventId);
  }
  if (!(OPENAI_CLIENT_EVENT_TYPES as string[]).includes(type)) {
    return invalid("invalid_value", `Invalid value: '${type.slice(0, 100)}'. Supported values are: ${OPENAI_CLIENT_EVENT_TYPES.map((t) => `'${t}'`).join(", ")}.`, "type", clientEventId);
  }
  const parsed = openAiClientEvent.safeParse(raw);
  if (parsed.success) return { ok: true, event: parsed.data, clientEventId };
  const issue = parsed.error.issues[0];
  const param = issue?.path.length ? issue.path.join(".") : null;
  return invalid(issueCode(issue), `Invalid ${param ?? type}: ${issue?.message ?? "invalid"}.`, param, clientEventId);
}

// ---------------------------------------------------------------- server events

const T = "conversation.item.input_audio_transcription";

function item(id: string) {
  return { id, object: "realtime.item" as const, type: "message" as const, status: "completed" as const, role: "user" as const, content: [{ type: "input_audio" as const, transcript: null }] };
}

/** One token per word, as the formatted transcript reads (a leading space after the first). */
export function logprobsOf(words: ServerEventOf<"conversation.item.input_audio_transcription.completed">["words"]): OpenAiLogprob[] {
  const out: OpenAiLogprob[] = [];
  for (const w of words) {
    const text = w.punctuated_word ?? w.word;
    if (text === "") continue; // folded into the word before it by smart formatting
    const token = out.length === 0 ? text : ` ${text}`;
    out.push({ token, logprob: w.probability === undefined ? 0 : Math.log(Math.max(w.probability, 1e-6)), bytes: [...Buffer.from(token, "utf8")] });
  }
  return out;
}

/** An item's `completed` in OpenAI's shape: `usage` in seconds of audio, `logprobs` when included. */
function completedOf(s: DoorState, event: ServerEventOf<"conversation.item.input_audio_transcription.completed">, eventId: string): OpenAiServerEvent {
  return {
    type: event.type,
    event_id: eventId,
    item_id: event.item_id,
    content_index: 0,
    transcript: event.transcript,
    usage: { type: "duration", seconds: Math.max(0, event.audio_end_ms - event.audio_start_ms) / 1000 },
    ...(wantsLogprobs(s.config) ? { logprobs: logprobsOf(event.words) } : {}),
    // extensions OpenAI clients ignore: the live speaker label (`diarize`) and its role
    ...(event.speaker ? { speaker: event.speaker } : {}),
    ...(event.speaker_role ? { speaker_role: event.speaker_role } : {}),
  };
}

/** Native error codes whose OpenAI `param` is known. */
const PARAM_OF_CODE: Record<string, string> = {
  semantic_vad_unavailable: "session.audio.input.turn_detection.type",
  invalid_string: "session",
};

/** The OpenAI server events a native event stands for (often one, sometimes none or three). */
export function translateServerEvent(s: DoorState, event: ServerEvent, ctx: TranslateContext): OpenAiServerEvent[] {
  const id = ctx.eventId;
  const manual = s.config.turnDetection === null;
  const transcribing = s.config.transcription !== null;
  switch (event.type) {
    case "session.created": {
      // the resume offer: an addition OpenAI's clients ignore (docs/realtime-resume.md)
      const resume = event.resume ? { resume: event.resume } : {};
      return [
        s.beta
          ? { type: "transcription_session.created", event_id: id(), session: betaView(s.config, ctx.sessionId, ctx.expiresAt), ...resume }
          : { type: "session.created", event_id: id(), session: gaView(s.config, ctx.sessionId, ctx.expiresAt), ...resume },
      ];
    }
    case "session.updated":
      s.updating = null;
      return [
        s.beta
          ? { type: "transcription_session.updated", event_id: id(), session: betaView(s.config, ctx.sessionId, ctx.expiresAt) }
          : { type: "session.updated", event_id: id(), session: gaView(s.config, ctx.sessionId, ctx.expiresAt) },
      ];
    case "input_audio_buffer.speech_started":
      return manual ? [] : [{ type: event.type, event_id: id(), item_id: event.item_id, audio_start_ms: event.audio_start_ms }];
    case "input_audio_buffer.speech_stopped":
      return manual ? [] : [{ type: event.type, event_id: id(), item_id: event.item_id, audio_end_ms: event.audio_end_ms }];
    case "input_audio_buffer.committed": {
      remember(s.committed, event.item_id);
      const previous = event.previous_item_id;
      const out: OpenAiServerEvent[] = [{ type: event.type, event_id: id(), item_id: event.item_id, previous_item_id: previous }];
      if (s.beta) out.push({ type: "conversation.item.created", event_id: id(), previous_item_id: previous, item: item(event.item_id) });
      else out.push({ type: "conversation.item.added", event_id: id(), previous_item_id: previous, item: item(event.item_id) }, { type: "conversation.item.done", event_id: id(), previous_item_id: previous, item: item(event.item_id) });
      const held = s.held.get(event.item_id);
      s.held.delete(event.item_id);
      for (const delta of held ?? []) out.push({ type: `${T}.delta`, event_id: id(), item_id: event.item_id, content_index: 0, delta });
      return out;
    }
    case "input_audio_buffer.cleared":
      s.held.clear();
      return [{ type: event.type, event_id: id() }];
    case `${T}.delta`: {
      if (!transcribing || s.finished.has(event.item_id) || event.delta === "") return [];
      if (manual && !s.committed.has(event.item_id)) {
        const held = s.held.get(event.item_id) ?? [];
        held.push(event.delta);
        s.held.set(event.item_id, held);
        return [];
      }
      return [{ type: event.type, event_id: id(), item_id: event.item_id, content_index: 0, delta: event.delta }];
    }
    case `${T}.completed`: {
      if (s.finished.has(event.item_id)) return [];
      remember(s.finished, event.item_id);
      s.held.delete(event.item_id);
      return transcribing ? [completedOf(s, event, id())] : [];
    }
    case "conversation.speaker.merged":
      // an extension event OpenAI clients ignore, sent as the native door sends it
      return transcribing ? [{ type: event.type, event_id: id(), item_id: event.item_id, from: event.from, into: event.into }] : [];
    case `${T}.failed`: {
      if (s.finished.has(event.item_id)) return [];
      remember(s.finished, event.item_id);
      s.held.delete(event.item_id);
      if (!transcribing) return [];
      return [{ type: event.type, event_id: id(), item_id: event.item_id, content_index: 0, error: { ...event.error, param: null } }];
    }
    case "error": {
      if (s.updating) {
        s.config = s.updating.previous;
        s.updating = null;
      }
      return [{ type: "error", event_id: id(), error: { ...event.error, param: PARAM_OF_CODE[event.error.code] ?? event.error.param ?? null } }];
    }
    case "session.resumed":
      // not OpenAI's: the first event of a resumed connection, as native
      return [{ type: event.type, event_id: id(), session_id: event.session_id, audio_ms: event.audio_ms, replayed: event.replayed, resume: event.resume }];
    // not OpenAI events
    case "input_audio_buffer.turn_end_likely":
    case "input_audio_buffer.turn_resumed":
    case `${T}.interim`:
      return [];
    default: {
      const never: never = event;
      return never;
    }
  }
}
