import { openAiClientEvent, OPENAI_BETA_SUBPROTOCOL, OPENAI_INTENT_CLOSE, OPENAI_MAX_TEXT_FRAME_BYTES, type DoorRecord, type OpenAiClientEvent, type OpenAiServerEvent } from "../../schemas/openai-realtime";
import { clientMessage, INTERNAL_SAMPLE_RATE, type ClientMessage, type ServerEvent, type ServerEventOf, type TurnDetection } from "../../schemas/realtime";
import type { TranscriptionSessionPreset } from "../../schemas/client-secrets";
import type { Admission } from "./admit";
import { applyBetaUpdate, applySessionUpdate, defaultDoorConfig, nativeSettings, type DoorConfig, type DoorConfigUpdate } from "./openai-config";
import { newDoorState, readOpenAiFrame, translateServerEvent, type DoorState } from "./openai-events";
import { DOOR_START, doorEventId, storedEventIdOf, type DoorPosition } from "./openai-resume";
import { createDoorAudio } from "./openai-audio";
import type { Session } from "./session";
import type { SessionSocket } from "./session-io";

/**
 * The OpenAI Realtime door (`WS /v1/realtime`): an adapter in front of the one session
 * implementation (session.ts). OpenAI client events become native messages and audio
 * (base64 `input_audio_buffer.append` decoded, G.711 expanded, resampled to the session's
 * 16 kHz), native server events become OpenAI's (openai-events.ts). Keys, plans, leases,
 * quotas, usage, VAD, streaming recognition, metrics and traces are the native session's.
 */

/** What the upgrade request tells the door (read before the 101). */
export interface OpenAiUpgrade {
  /** Beta shapes: the `openai-beta.realtime-v1` subprotocol or `OpenAI-Beta: realtime=v1`. (The protocol answered is domain/keys/upgrade-credentials.ts's.) */
  beta: boolean;
  /** `?intent=`; anything but `transcription` is answered with `error` and close 4000 after the 101. */
  intent: string | null;
  /** `?model=`: the default transcription model (a preference for the worker router). */
  model: string | null;
}

export function readOpenAiUpgrade(query: string, offeredProtocols: string, openaiBeta: string): OpenAiUpgrade {
  const url = new URL(`http://x/?${query}`);
  const offered = offeredProtocols.split(",").map((p) => p.trim());
  return {
    beta: offered.includes(OPENAI_BETA_SUBPROTOCOL) || /\brealtime=v1\b/.test(openaiBeta),
    intent: url.searchParams.get("intent"),
    model: url.searchParams.get("model")?.slice(0, 100) || null,
  };
}

/** The session the door opens: audio reaches it as 16 kHz mono PCM16, whatever the client's format. */
export const doorAdmission = (admission: Admission): Admission => ({ ...admission, sampleRate: INTERNAL_SAMPLE_RATE, channels: 1, multichannel: false });

/** The socket the door writes OpenAI's JSON to (uWS semantics for send: 1 sent, 0 buffered, 2 dropped). */
export interface DoorSocket {
  send(text: string): number;
  bufferedAmount(): number;
  end(code: number, reason: string): void;
}

export interface OpenAiDoorOptions {
  upgrade: OpenAiUpgrade;
  /** The gateway's VAD defaults (server_vad values shown until the client changes them). */
  vad: TurnDetection;
  /** The session's largest binary frame: decoded audio is handed over in pieces of at most this. */
  maxFrameBytes: number;
  /** The session config bound to the `ek_` secret the connection authenticated with: a new session starts with it (the client may update it). */
  preset?: TranscriptionSessionPreset;
  start: DoorStart;
  /** An update was accepted: the door's state to store for a resume (resume.ts doorChanged). */
  persist(record: DoorRecord): void;
}

/** How the door starts: its state (newDoorStart, or as stored for a resume) and, resumed, the position the client's `last_event_id` named. */
export interface DoorStart {
  record: DoorRecord;
  resumedAt: DoorPosition | null;
}

export type OpenAiDoor = ReturnType<typeof createOpenAiDoor>;

/** The start config with a secret's preset applied (validated by the secrets route; read again here as a session.update would be). */
function presetConfig(preset: TranscriptionSessionPreset | undefined, start: DoorConfig, vad: TurnDetection): DoorConfig {
  if (!preset) return start;
  const parsed = openAiClientEvent.safeParse({ type: "session.update", session: preset });
  if (!parsed.success || parsed.data.type !== "session.update") return start;
  const applied = applySessionUpdate(start, parsed.data.session, vad);
  return applied.ok ? applied.config : start;
}

/** A new session's door state: the URL's model, the secret's preset, the upgrade's protocol generation; it expires with the plan's longest session. */
export function newDoorStart(upgrade: OpenAiUpgrade, admission: Admission, vad: TurnDetection, nowMs: number): DoorStart {
  const config = presetConfig(admission.presetSession, defaultDoorConfig(vad, upgrade.model, admission.language), vad);
  return { record: { config, beta: upgrade.beta, expiresAt: Math.floor(nowMs / 1000) + admission.limits.maxSessionSeconds }, resumedAt: null };
}

export function createOpenAiDoor(socket: DoorSocket, admission: Admission, options: OpenAiDoorOptions) {
  const { upgrade, vad, start } = options;
  const state: DoorState = newDoorState(start.record.config, start.record.beta);
  /** Where the client stands in the session's events (openai-resume.ts): the last translated event sent. */
  let clientAt: DoorPosition = start.resumedAt ?? DOOR_START;
  /** While a stored event is translated: its stable id and the index of its next door event. */
  let translating: { eventId: string; index: number } | null = null;
  const eventId = () => (translating ? doorEventId({ eventId: translating.eventId, index: translating.index++ }, false) : doorEventId(clientAt, true));
  const ctx = { eventId, sessionId: admission.sessionId, expiresAt: start.record.expiresAt };
  /** A resume whose position is inside a stored event's door events: the rest of them, sent after session.resumed. */
  let tail: { events: OpenAiServerEvent[]; at: DoorPosition } | null = null;
  let session: Session | null = null;
  let muted = false; // applying a preset: session.created already showed it
  const audio = createDoorAudio(options.maxFrameBytes, { taking: () => session?.connected === true, take: (frame) => session!.onAudio(frame) });
  const primed = (event: ServerEventOf<"session.resumed">): ServerEvent => ({ ...event, audio_ms: audio.resumedAt(event.audio_ms) });

  const sendOpenAi = (event: OpenAiServerEvent) => socket.send(JSON.stringify(event));
  /** The worst send result of `events` (so the session sees backpressure). */
  const sendAll = (events: OpenAiServerEvent[], worst = 1) => {
    for (const e of events) {
      const r = sendOpenAi(e);
      worst = r === 2 || worst === 2 ? 2 : Math.min(worst, r);
    }
    return worst;
  };
  /** A native event in OpenAI's shapes, with ids from its stable id; the position after it, had all of them been sent. */
  const translate = (event: ServerEvent): { events: OpenAiServerEvent[]; after: DoorPosition } => {
    const stored = storedEventIdOf(event as { event_id?: string });
    translating = stored ? { eventId: stored, index: 0 } : null;
    try {
      const events = translateServerEvent(state, event, ctx);
      return { events, after: stored && events.length > 0 ? { eventId: stored, index: events.length - 1 } : clientAt };
    } finally {
      translating = null;
    }
  };
  const sendError = (code: string, message: string, param: string | null, clientEventId: string | null) =>
    sendOpenAi({ type: "error", event_id: eventId(), error: { type: "invalid_request_error", code, message, param, event_id: clientEventId } });

  /** What the native session sends, in OpenAI's shapes; the worst send result (so the session sees backpressure). */
  const sessionSocket: SessionSocket = {
    send(event: ServerEvent) {
      if (muted) return 1;
      if (event.type === "input_audio_buffer.committed" && event.reason !== "max_length") audio.emptied();
      const { events, after } = translate(event.type === "session.resumed" ? primed(event) : event);
      let worst = sendAll(events);
      clientAt = after;
      if (event.type === "session.resumed" && tail) {
        worst = sendAll(tail.events, worst);
        clientAt = tail.at;
        tail = null;
      }
      return worst;
    },
    bufferedAmount: () => socket.bufferedAmount(),
    end: (code, reason) => socket.end(code, reason),
    /** A stored event a resume's replay passes over: translated for the door's state (committed, finished items); the door events of the client's position it has not got go out after session.resumed. */
    prior(event: ServerEvent) {
      const { events, after } = translate(event);
      const position = start.resumedAt;
      if (!position || storedEventIdOf(event as { event_id?: string }) !== position.eventId) return;
      const rest = events.slice(position.index + 1);
      if (rest.length > 0) tail = { events: rest, at: after };
    },
  };

  /** Hands a native client message to the session (parsed again: its strings must be storable). */
  const toSession = (message: ClientMessage, clientEventId: string | null) => {
    const parsed = clientMessage.safeParse(message);
    if (!parsed.success) return sendError("invalid_value", `Invalid session settings: ${parsed.error.issues[0]?.message ?? "invalid"}.`, "session", clientEventId);
    session?.onMessage(parsed.data, clientEventId);
  };

  const update = (result: DoorConfigUpdate, clientEventId: string | null) => {
    if (!result.ok) return sendError(result.error.code, result.error.message, result.error.param, clientEventId);
    state.updating = { previous: state.config };
    state.config = result.config;
    toSession({ type: "session.update", ...(clientEventId ? { event_id: clientEventId } : {}), session: nativeSettings(result.config, vad) }, clientEventId);
    // refused (error) or not answered at all (closing): nothing changes
    if (state.updating) state.config = state.updating.previous;
    else options.persist({ config: state.config, beta: state.beta, expiresAt: start.record.expiresAt });
    state.updating = null;
  };

  const apply = (event: OpenAiClientEvent, clientEventId: string | null) => {
    const id = clientEventId ? { event_id: clientEventId } : {};
    switch (event.type) {
      case "input_audio_buffer.append":
      case "session.input_audio_buffer.append":
      {
        const refused = audio.append(event.audio, state.config.format);
        return void (refused && sendError("invalid_value", refused, "audio", clientEventId));
      }
      case "input_audio_buffer.commit":
        if (state.config.turnDetection === null && audio.commitRefusal()) return sendError("input_audio_buffer_commit_empty", audio.commitRefusal()!, null, clientEventId);
        audio.emptied();
        return toSession({ type: "input_audio_buffer.commit", ...id }, clientEventId);
      case "input_audio_buffer.clear":
        audio.emptied();
        return toSession({ type: "input_audio_buffer.clear", ...id }, clientEventId);
      case "session.update":
        return update(applySessionUpdate(state.config, event.session, vad), clientEventId);
      case "transcription_session.update":
        state.beta = true; // a beta client that sent no beta header
        return update(applyBetaUpdate(state.config, event.session, vad), clientEventId);
      case "session.close":
        audio.flush();
        return toSession({ type: "session.close", ...id }, clientEventId);
      default: {
        const never: never = event;
        return never;
      }
    }
  };

  return {
    /** The socket to open the native session on. */
    sessionSocket,
    /** Why this connection cannot be a transcription session (an `?intent` other than transcription), or null. */
    refusal(): { code: number; reason: string } | null {
      if (upgrade.intent === null || upgrade.intent === "transcription") return null;
      sendError("invalid_value", `Invalid value for 'intent': ${JSON.stringify(upgrade.intent.slice(0, 50))}. This server serves transcription sessions only: use ?intent=transcription.`, "intent", null);
      return OPENAI_INTENT_CLOSE;
    },
    /** The session opened on `sessionSocket`; a preset config is applied now, before any audio. */
    attach(s: Session) {
      session = s;
      // a resumed session's VAD kept its settings
      if (options.preset && !start.resumedAt) {
        muted = true;
        toSession({ type: "session.update", session: nativeSettings(state.config, vad) }, null);
        muted = false;
      }
    },
    /** A text frame: one OpenAI client event. */
    onText(frame: ArrayBuffer) {
      if (!session?.connected) return;
      if (frame.byteLength > OPENAI_MAX_TEXT_FRAME_BYTES) return session.frameTooLarge();
      const read = readOpenAiFrame(Buffer.from(frame).toString("utf8"));
      if (!read.ok) return sendOpenAi({ type: "error", event_id: eventId(), error: read.error });
      apply(read.event, read.clientEventId);
    },
    /** The socket is gone: the resamplers' WASM state is freed. */
    closed: audio.free,
    /** A binary frame: OpenAI accepts none. */
    onBinary() {
      sendError("invalid_event", "Expected a text WebSocket message; binary frames are not supported.", null, null);
    },
  };
}
