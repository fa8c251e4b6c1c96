import type { ClientMessage, CLOSE, ServerEvent } from "../../schemas/realtime";
import type { OpenAiClientEvent, OpenAiServerEvent } from "../../schemas/openai-realtime";

/**
 * What each realtime message is for, in words, for /asyncapi.json (asyncapi.ts takes the
 * shapes from the zod schemas). One table per door and direction, keyed by the union's
 * `type`s: a message added to a union without its entry here does not compile, and the
 * document builder refuses an entry missing at run time too.
 */
export interface MessageText {
  summary: string;
  description?: string;
}


export const NATIVE_CLIENT_TEXT: Record<ClientMessage["type"], MessageText> = {
  "input_audio_buffer.commit": {
    summary: "End the open utterance now; it is transcribed",
    description: "Answered by `input_audio_buffer.committed` (`reason: \"commit\"`), or `error` `input_audio_buffer_commit_empty` when no speech is open. A multichannel session commits every channel's open speech.",
  },
  "input_audio_buffer.clear": { summary: "Drop the open utterance", description: "Answered by `input_audio_buffer.cleared` (once per channel in a multichannel session)." },
  "session.update": {
    summary: "Change turn detection (server_vad, semantic_vad, manual) and transcription settings",
    description: "Partial: fields left out keep their values (`input_audio_transcription.keyterms: []` clears the keyterms). Answered by `session.updated` with the whole settings in effect, or `error` (the session keeps what it had; `semantic_vad_unavailable` where the engine cannot stream; a field that does not parse is named by `error.param`).",
  },
  "session.close": {
    summary: "Graceful close",
    description: "The open utterance is committed (`reason: \"close\"`), every committed item gets its result (at most 30 s), then the socket closes 1000.",
  },
};

export const NATIVE_SERVER_TEXT: Record<ServerEvent["type"], MessageText> = {
  "session.created": {
    summary: "The session is open: its id, audio format, turn detection, plan and limits",
    description: "The first event after the 101. `resume` (absent without a token secret) is the credential to resume the session after a lost connection.",
  },
  "session.resumed": {
    summary: "First event of a resumed connection",
    description: "Send audio from `audio_ms` on; `replayed` stored events follow before the live ones; `resume` is the next credential (each is single use).",
  },
  "session.updated": { summary: "Answer to `session.update`: the whole settings now in effect" },
  "input_audio_buffer.speech_started": { summary: "The VAD heard speech start; `item_id` names the item it opens" },
  "input_audio_buffer.speech_stopped": { summary: "The VAD heard speech end at `audio_end_ms`" },
  "input_audio_buffer.committed": {
    summary: "An item is closed and goes to transcription",
    description: "`reason`: `vad` (silence after speech, or semantic_vad's end of turn), `commit` (the client), `max_length` (cut at `max_utterance_ms`) or `close`. Every committed item gets exactly one `completed` or `failed`.",
  },
  "input_audio_buffer.cleared": { summary: "Answer to `input_audio_buffer.clear`: the open utterance was dropped" },
  "input_audio_buffer.turn_end_likely": {
    summary: "semantic_vad thinks the open item's turn may be over (opt-in: `early_turn_events`)",
    description: "`transcript` is the running hypothesis; `committed` (it is over) or `turn_resumed` (it is not) follows. At most one per pause.",
  },
  "input_audio_buffer.turn_resumed": { summary: "After `turn_end_likely`: speech went on in the same item at `audio_start_ms`" },
  "conversation.item.input_audio_transcription.delta": {
    summary: "Append-only text of an item",
    description: "Streamed items: words as they become stable while the speaker talks, then the rest at commit; commit-path items: one delta with the whole text. An item's deltas concatenated are its `completed.transcript`.",
  },
  "conversation.item.input_audio_transcription.interim": {
    summary: "The whole running hypothesis of the open item (opt-in: `interim_results`), replacing the previous interim",
    description: "Unstable: words may still change. `delta` and `completed` are authoritative.",
  },
  "conversation.item.input_audio_transcription.completed": {
    summary: "The item's final transcript, with word timings on the session's audio timeline",
    description: "With `diarize`: `speaker` (`speaker_<n>`, in order of first appearance; never changed once sent), `speaker_role` where `speaker_roles` names it, and `speaker` on each word where the item holds a change of speaker.",
  },
  "conversation.item.input_audio_transcription.failed": { summary: "The item could not be transcribed (e.g. `transcription_failed`)" },
  "conversation.speaker.merged": {
    summary: "With `diarize`: two speaker labels turned out to be one person; `from` is folded into the earlier `into`",
    description: "Said once per folded label, before the `completed` of the item whose labelling folded it (`item_id`). Labels already sent never change; later items carry `into`.",
  },
  error: {
    summary: "A client message or frame was refused; the socket stays open",
    description: "`error.event_id` echoes the client's `event_id`. Codes include `invalid_json`, `unknown_event_type`, `invalid_event`, `invalid_string`, `invalid_audio_frame`, `input_audio_buffer_commit_empty`, `semantic_vad_unavailable`, `resume_in_progress`.",
  },
};

export const OPENAI_CLIENT_TEXT: Record<OpenAiClientEvent["type"], MessageText> = {
  "session.update": {
    summary: "GA: configure the transcription session (`session.type` must be `transcription`)",
    description: "Format, transcription model/language/prompt (and `keywords`: the native keyterms; `languages`: the first is the language hint; `delay`: the partial interval and an `auto` eagerness), turn detection (`server_vad`, `semantic_vad`, `null` = manual commit), noise reduction, `include` logprobs. Answered by `session.updated`, or `error` with `param`.",
  },
  "transcription_session.update": { summary: "Beta: the same settings as flat fields; the session answers in beta shapes from then on" },
  "input_audio_buffer.append": {
    summary: "Audio, base64 in a text frame (≤ 16 MiB)",
    description: "PCM16 24 kHz mono (`audio/pcm`), or G.711 µ-law / A-law at 8 kHz, as the session's format says. Bad base64 or an odd number of PCM bytes: `error` `invalid_value`, `param: \"audio\"`.",
  },
  "session.input_audio_buffer.append": { summary: "The same as `input_audio_buffer.append`, by the name the live GA server also accepts" },
  "input_audio_buffer.commit": { summary: "End the open item now (manual turn detection: under 100 ms of audio is `input_audio_buffer_commit_empty`)" },
  "input_audio_buffer.clear": { summary: "Drop the open item's audio" },
  "session.close": { summary: "Graceful close: flush, deliver pending transcripts, close 1000" },
};

export const OPENAI_SERVER_TEXT: Record<OpenAiServerEvent["type"], MessageText> = {
  "session.created": { summary: "GA: the transcription session as it starts (a client secret's preset applied); `resume` is an addition" },
  "session.updated": { summary: "GA: answer to `session.update`, the whole session in effect" },
  "transcription_session.created": { summary: "Beta: the session as it starts, flat fields" },
  "transcription_session.updated": { summary: "Beta: answer to `transcription_session.update`" },
  "input_audio_buffer.speech_started": { summary: "Speech started (server VAD only); `item_id` names the item" },
  "input_audio_buffer.speech_stopped": { summary: "Speech stopped at `audio_end_ms`" },
  "input_audio_buffer.committed": { summary: "The item is closed and goes to transcription" },
  "input_audio_buffer.cleared": { summary: "Answer to `input_audio_buffer.clear`" },
  "conversation.item.added": { summary: "GA: the committed item joins the conversation (transcript still null)" },
  "conversation.item.done": { summary: "GA: the committed item is complete in the conversation" },
  "conversation.item.created": { summary: "Beta: the committed item joins the conversation" },
  "conversation.item.input_audio_transcription.delta": { summary: "Append-only text of an item (words once the decoder stops revising them)" },
  "conversation.item.input_audio_transcription.completed": {
    summary: "The item's final transcript; `usage` in seconds of audio, `logprobs` when included",
    description: "Exactly one `completed` or `failed` per committed item. Authoritative: may differ from the deltas' concatenation. With the `diarize` extension: `speaker` and, where `speaker_roles` names it, `speaker_role`.",
  },
  "conversation.item.input_audio_transcription.failed": { summary: "The item could not be transcribed" },
  "conversation.speaker.merged": { summary: "Not OpenAI's: with the `diarize` extension, speaker label `from` is folded into the earlier `into` (the native event)" },
  error: {
    summary: "A client event was refused (`type`, `code`, `message`, `param`, the client's `event_id`); the socket stays open",
    description: "Codes include `invalid_json`, `invalid_value` (also an unknown or conversation event type, `param: \"type\"`), `invalid_event` (a binary frame), `missing_required_parameter`, `input_audio_buffer_commit_empty`, `semantic_vad_unavailable`.",
  },
  "session.resumed": { summary: "Not OpenAI's: the first event of a resumed connection (send audio from `audio_ms` on, at the session's format)" },
};

/** Why each close of spec 7.3 happens (docs/realtime-reference.md "Close codes"). */
export const CLOSE_TEXT: Record<keyof typeof CLOSE, string> = {
  normal: "after `session.close` (every transcript delivered), or the client closed",
  sessionAudioLimit: "audio received passed the plan's `maxAudioSecondsPerSession`",
  audioQuotaExhausted: "audio received passed `remaining_audio_seconds` of the billing window",
  sessionDurationLimit: "the session's wall clock passed `max_session_seconds`",
  keyRevoked: "the session's API key was revoked",
  frameTooLarge: "a frame over the size limit (native 1 MiB, the OpenAI door's text frames 16 MiB)",
  clientError: "an unexpected gateway error",
  upstreamUnavailable: "NATS or the engines are unavailable, or the gateway is shutting down and cannot hold the session",
  upstreamBackpressure: "the plane is far behind and this is the gateway's newest session (shed)",
  clientBackpressure: "the client does not read its events (buffer over RT_MAX_CLIENT_BUFFER_BYTES)",
  idleTimeout: "no audio for `idle_timeout_seconds`",
  sessionTakenOver: "a resume with this session's credential took the session over",
  gatewayRestarting: "the gateway is restarting and holds the session: resume it, on any gateway",
};
