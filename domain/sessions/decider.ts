import type { ServerEvent } from "../../schemas/realtime";
import type { AudioControl, UtteranceCommand } from "../../schemas/realtime-internal";
import type { UtteranceEndReason, VadEvent } from "../../shared/audio/vad";
import { msToSamples, VAD_SAMPLE_RATE } from "../../shared/audio/vad";
import type { RtEvent, SessionEventKey } from "./events";

/**
 * The server VAD's session logic as a pure decider: what a session's next input means,
 * with no I/O. The VAD service (services/vad/handle-entry.ts) turns each JetStream entry
 * into an input (running the audio through the session's WebRTC segmenter first), calls
 * `decide`, and carries out the effects in the order given.
 *
 * Every event carries what makes it unique in its session (its item, or the control's
 * place in the session, or nothing for the once-per-session `flushed`), from which the
 * sessions store names it (store.ts `sessionEventId`): the same when the same audio or
 * control is handled again after a redelivery or a takeover.
 */

export type StartControl = Extract<AudioControl, { kind: "start" }>;
type UpdateControl = Extract<AudioControl, { kind: "update" }>;

export interface DeciderState {
  /** The session's settings as a `start` control (what is kept in KV for a takeover). */
  settings: StartControl;
  /** Start of the newest item id on the audio timeline (ms); ids never repeat. */
  lastItemMs: number;
  currentItem: string | null;
  previousItem: string | null;
}

export type DeciderInput =
  /** The gateway's `start` control: a new (or restarted) session. */
  | { kind: "start"; settings: StartControl }
  | { kind: "update"; update: UpdateControl }
  /** What the segmenter made of a piece of audio. */
  | { kind: "audio"; vad: VadEvent[] }
  /** A client commit: `vad` is the segmenter's commit("commit"), [] when no speech was open. */
  | { kind: "commit"; vad: VadEvent[]; seq: number; clientEventId: string | null }
  | { kind: "clear"; seq: number }
  /**
   * semantic_vad: the open item's turn may be over (the pause began at `atSample`), or
   * speech went on after that; sent as events only with `early_turn_events`.
   */
  | { kind: "turn_end_likely"; atSample: number; transcript: string }
  | { kind: "turn_resumed"; atSample: number }
  /** A connection resumed the session: `position` is where the segmenter stands (the next audio's first sample). */
  | { kind: "resume"; gen: number; position: number; seq: number }
  /** The session ended; with `flush`, `vad` is the segmenter's commit("close"). */
  | { kind: "end"; flush: boolean; vad: VadEvent[] };

export type Effect =
  /** Append to the session's event subject (in order; the store names it from `key`). */
  | { kind: "event"; event: RtEvent; key: SessionEventKey }
  /** Transcribe this committed utterance (the streamed decoder's, if it has this item). */
  | { kind: "utterance"; command: UtteranceCommand; pcm: Int16Array; reason: UtteranceEndReason; release?(): void }
  /** Speech started: a streaming decoder may take the item from this timeline sample. */
  | { kind: "open_stream"; item: string; startSample: number }
  /** Drop the open streamed utterance (clear, restart, end). */
  | { kind: "drop_stream" }
  /** Keep the settings for a takeover; null deletes them (session over). */
  | { kind: "settings"; settings: StartControl | null };

export interface Decision {
  /** null: the session is over. */
  state: DeciderState | null;
  effects: Effect[];
}

export interface DecideContext {
  sessionId: string;
  /** Wall clock (ms since the epoch) for `decided_at`. */
  now: number;
  /** A fresh `event_id` (shown to the client; the store's event id is what repeats). */
  newId: () => string;
}

export function initialState(settings: StartControl): DeciderState {
  return { settings, lastItemMs: -1, currentItem: null, previousItem: null };
}

export function decide(input: DeciderInput, state: DeciderState | null, ctx: DecideContext): Decision {
  if (input.kind === "start") {
    const next = initialState(input.settings);
    return { state: next, effects: [{ kind: "drop_stream" }, { kind: "settings", settings: next.settings }] };
  }
  if (!state) return { state, effects: [] }; // unknown session: nothing to decide
  switch (input.kind) {
    case "update": {
      const u = input.update;
      const s = state.settings;
      const settings: StartControl = {
        ...s,
        turn_detection: u.turn_detection,
        language: u.language,
        prompt: u.prompt,
        model: u.model,
        keyterms: u.keyterms ?? s.keyterms,
        partial_interval_ms: u.partial_interval_ms ?? s.partial_interval_ms,
        interim_results: u.interim_results ?? s.interim_results,
        smart_format: u.smart_format ?? s.smart_format,
        redact: u.redact ?? s.redact,
        // the gateway sends the whole of these: absent is off
        diarize: u.diarize,
        speakers: u.speakers,
        max_speakers: u.max_speakers,
        speaker_roles: u.speaker_roles,
      };
      return { state: { ...state, settings }, effects: [{ kind: "settings", settings }] };
    }
    case "audio":
      return fromVad(input.vad, state, ctx);
    case "commit": {
      if (input.vad.length > 0) return fromVad(input.vad, state, ctx);
      const e: ServerEvent = {
        type: "error",
        event_id: ctx.newId(),
        error: { type: "invalid_request_error", code: "input_audio_buffer_commit_empty", message: "Nothing to commit: no speech is in progress.", event_id: input.clientEventId },
      };
      return { state, effects: [serverEvent(e, { kind: "control", seq: input.seq })] };
    }
    case "clear":
      return {
        state: { ...state, currentItem: null },
        effects: [{ kind: "drop_stream" }, serverEvent({ type: "input_audio_buffer.cleared", event_id: ctx.newId() }, { kind: "control", seq: input.seq })],
      };
    case "turn_end_likely":
    case "turn_resumed": {
      const item = state.currentItem;
      const t = state.settings.turn_detection;
      if (!item || t.type !== "semantic_vad" || !t.early_turn_events) return { state, effects: [] };
      const ms = Math.round((input.atSample * 1000) / VAD_SAMPLE_RATE);
      const e: ServerEvent =
        input.kind === "turn_end_likely"
          ? { type: "input_audio_buffer.turn_end_likely", event_id: ctx.newId(), item_id: item, audio_end_ms: ms, transcript: input.transcript }
          : { type: "input_audio_buffer.turn_resumed", event_id: ctx.newId(), item_id: item, audio_start_ms: ms };
      // one of each per pause: the pause's place on the timeline tells them apart
      return { state, effects: [serverEvent(e, { kind: "partial", item, at: input.atSample })] };
    }
    case "resume":
      return {
        state,
        effects: [{ kind: "event", event: { type: "rt.session.resumed", data: { session_id: ctx.sessionId, gen: input.gen, position: input.position } }, key: { kind: "control", seq: input.seq } }],
      };
    case "end": {
      const effects: Effect[] = [];
      if (input.flush) {
        effects.push(...fromVad(input.vad, state, ctx).effects);
        effects.push({ kind: "event", event: { type: "rt.session.flushed", data: { session_id: ctx.sessionId } }, key: { kind: "session" } });
      }
      effects.push({ kind: "drop_stream" }, { kind: "settings", settings: null });
      return { state: null, effects };
    }
    default: {
      const never: never = input;
      return never;
    }
  }
}

function fromVad(vad: VadEvent[], state: DeciderState, ctx: DecideContext): Decision {
  let next = state;
  const effects: Effect[] = [];
  const itemAt = (ms: number) => {
    const at = Math.max(Math.round(ms), next.lastItemMs + 1);
    next = { ...next, lastItemMs: at };
    return itemId(ctx.sessionId, at);
  };
  for (const e of vad) {
    switch (e.kind) {
      case "speech_started": {
        const item = itemAt(e.audioStartMs);
        next = { ...next, currentItem: item };
        effects.push({ kind: "open_stream", item, startSample: msToSamples(e.audioStartMs) });
        effects.push(serverEvent({ type: "input_audio_buffer.speech_started", event_id: ctx.newId(), item_id: item, audio_start_ms: e.audioStartMs }, { kind: "item", item }));
        break;
      }
      case "speech_stopped": {
        const item = next.currentItem ?? itemAt(e.audioEndMs);
        next = { ...next, currentItem: item };
        effects.push(serverEvent({ type: "input_audio_buffer.speech_stopped", event_id: ctx.newId(), item_id: item, audio_end_ms: e.audioEndMs }, { kind: "item", item }));
        break;
      }
      case "utterance": {
        const item = next.currentItem ?? itemAt(e.audioStartMs);
        const s = next.settings;
        // the event first (the client sees committed before any transcript), then the command
        effects.push(
          serverEvent(
            {
              type: "input_audio_buffer.committed",
              event_id: ctx.newId(),
              item_id: item,
              previous_item_id: next.previousItem,
              audio_start_ms: e.audioStartMs,
              audio_end_ms: e.audioEndMs,
              reason: e.reason,
            },
            { kind: "item", item },
          ),
        );
        const command: UtteranceCommand = {
          session_id: ctx.sessionId,
          item_id: item,
          key_id: s.key_id,
          ...(s.owner_id ? { owner_id: s.owner_id } : {}),
          audio_start_ms: e.audioStartMs,
          audio_end_ms: e.audioEndMs,
          language: s.language,
          prompt: s.prompt,
          model: s.model,
          ...(s.keyterms?.length ? { keyterms: s.keyterms } : {}),
          max_concurrent_utterances: s.max_concurrent_utterances,
          ...(s.smart_format === false ? { smart_format: false } : {}),
          ...(s.redact?.length ? { redact: s.redact } : {}),
          decided_at: ctx.now,
        };
        effects.push({ kind: "utterance", command, pcm: e.pcm, reason: e.reason, release: e.release });
        next = { ...next, previousItem: item, currentItem: null };
        break;
      }
      default: {
        const never: never = e;
        return never;
      }
    }
  }
  return { state: next, effects };
}

function serverEvent(e: ServerEvent, key: SessionEventKey): Effect {
  return { kind: "event", event: { type: "rt.server_event", data: e }, key };
}

/**
 * Item ids come from where the item starts on the session's audio timeline, so a
 * replica that handles the same audio again (redelivery, takeover) names it the same
 * and its events deduplicate; ids of one session never repeat.
 */
function itemId(sessionId: string, ms: number): string {
  return `item_${sessionId.slice(5, 17)}_${String(ms).padStart(8, "0")}`;
}
