import { z } from "zod";
import { REDACT_ENTITIES, redactList } from "./redact";
import { safeString } from "./safe-string";
import { transcriptWord } from "./transcription";
import { keytermsJson } from "./keyterms";

/**
 * The realtime plane's wire contract: WebSocket client messages, server events (OpenAI
 * realtime transcription names and fields where they fit; `session.created` exactly per
 * spec 6.1), the upgrade refusal body, close codes (spec 7.3), and the audio controls,
 * headers and utterance commands the gateway, the VAD and the transcriber exchange. The
 * session's own records on rt.evt are the sessions aggregate's (domain/sessions/events.ts).
 */

export const REALTIME_PATH = "/v1/audio/transcriptions/stream";

/** Sample rates a client may declare with `?sample_rate=`; audio is resampled to 16 kHz. */
export const SUPPORTED_SAMPLE_RATES = [8000, 16000, 24000, 48000] as const;
/** The rate every internal consumer (VAD, workers) sees. */
export const INTERNAL_SAMPLE_RATE = 16000;

// ---------------------------------------------------------------- turn detection

/** How soon `semantic_vad` ends a turn (domain/sessions/end-of-turn.ts; `auto` is `medium`). */
const eagerness = z.enum(["low", "medium", "high", "auto"]);
export type Eagerness = z.infer<typeof eagerness>;
const TURN_DETECTION_TYPES = ["server_vad", "semantic_vad", "manual"] as const;

/**
 * Turn detection (WebRTC VAD). `threshold` is the fraction of 30 ms frames in a 300 ms
 * window that must be voiced to start speech; `prefix_padding_ms` of audio before the
 * start is kept in the utterance. `server_vad`: `silence_duration_ms` of unvoiced audio
 * ends it. `semantic_vad` (streaming sessions only): the silence that ends it depends
 * on whether the words so far look finished, by `eagerness` (docs/realtime-reference.md,
 * "Semantic end of turn"); `silence_duration_ms` is kept for a switch back. `manual`: no
 * voice detection, every frame counts as speech, so the audio since the last commit (or
 * clear) is one open item that only `input_audio_buffer.commit` ends (OpenAI's
 * `turn_detection: null`; `max_utterance_ms` still cuts it into consecutive items).
 */
export const turnDetection = z.object({
  type: z.enum(TURN_DETECTION_TYPES),
  threshold: z.number().min(0.1).max(1),
  prefix_padding_ms: z.number().int().min(0).max(2000),
  silence_duration_ms: z.number().int().min(100).max(5000),
  /** WebRTC VAD aggressiveness 0 (least) .. 3 (most aggressive about non-speech). */
  aggressiveness: z.number().int().min(0).max(3),
  /** Utterances longer than this are cut and transcribed in pieces. */
  max_utterance_ms: z.number().int().min(1000).max(30000),
  /** semantic_vad: how soon a turn ends (absent: `auto`). */
  eagerness: eagerness.optional(),
  /**
   * Opt-in (default false): `input_audio_buffer.turn_end_likely` when the semantic
   * decider first thinks the turn may be over, `input_audio_buffer.turn_resumed` when
   * speech goes on after it. semantic_vad only.
   */
  early_turn_events: z.boolean().optional(),
});
export type TurnDetection = z.infer<typeof turnDetection>;

export const defaultTurnDetection: TurnDetection = {
  type: "server_vad",
  threshold: 0.6,
  prefix_padding_ms: 300,
  silence_duration_ms: 500,
  aggressiveness: 3,
  max_utterance_ms: 20000,
};

// ---------------------------------------------------------------- client messages

/**
 * A client's event_id is echoed in events the session records (rt.evt) and its
 * transcription settings travel in audio control messages and utterance commands, so
 * each is a safeString: NUL or a lone surrogate is answered with an `error` event
 * `invalid_string` (schemas/safe-string.ts).
 */
const clientEventId = safeString(128).optional();

/**
 * Streaming recognition (docs/realtime.md): how often the running hypothesis is read,
 * in ms of new speech. Added to the version-1 events as optional fields: readers that
 * do not know them are unaffected.
 */
const partialIntervalMs = z.number().int().min(100).max(5000);
export const DEFAULT_PARTIAL_INTERVAL_MS = 300;
/** The server VAD keeps up to this much audio after the last voiced frame: `audio_end_ms` = that frame's end + at most this. */
export const VAD_TRAILING_MS = 200;
/** A speaker count for live diarization: 1–10, as on the segment and batch planes. */
export const speakerCount = z.number().int().min(1).max(10);
/** Names for the speakers, as a job's `metadata.speaker_roles`: `{"0": "agent", "1": "customer"}` gives `speaker_0` the role "agent". */
export const speakerRoles = z.record(z.string().regex(/^(?:[0-9]|10)$/, "a speaker number 0-10"), safeString(64));
/**
 * Live speaker labels (docs/diarization.md "Realtime sessions"): `diarize` on, and the
 * count if known (`speakers`: exactly; `max_speakers`: at most, default 10).
 */
const diarizeSettings = {
  diarize: z.boolean().optional(),
  speakers: speakerCount.optional(),
  max_speakers: speakerCount.optional(),
  speaker_roles: speakerRoles.optional(),
};
/** A session's streaming settings, as session.created / session.updated show them. */
const streamingSettings = z.object({
  /** Utterances are decoded while spoken (partials, final at commit); false: commit → transcribe only. */
  streaming: z.boolean(),
  partial_interval_ms: partialIntervalMs,
  interim_results: z.boolean(),
  /** Punctuation, capitals and numerals in deltas and `completed` (default true; docs/design/realtime.md "Streaming recognition"). */
  smart_format: z.boolean(),
  /** Entities redacted in deltas and `completed` (docs/formatting.md "Redaction"); empty: none. */
  redact: z.array(z.enum(REDACT_ENTITIES)).optional(),
  ...diarizeSettings,
});

const sessionUpdate = z.object({
  type: z.literal("session.update"),
  event_id: clientEventId,
  session: z
    .object({
      turn_detection: turnDetection.partial().optional(),
      input_audio_transcription: z
        .object({
          language: safeString(16).min(2).optional(),
          prompt: safeString(2000).optional(),
          /** Words and phrases recognition favours (schemas/keyterms.ts): an array, or one comma-separated string; [] clears them. */
          keyterms: keytermsJson.optional(),
          model: safeString(100).optional(),
          /** Streaming sessions: read the running hypothesis every this many ms of new speech. */
          partial_interval_ms: partialIntervalMs.optional(),
          /** Streaming sessions: also send the replaceable full hypothesis (`...transcription.interim`). */
          interim_results: z.boolean().optional(),
          /** false: transcripts as recognised, without punctuation, capitals or numerals. */
          smart_format: z.boolean().optional(),
          /** "pci,ssn" or ["pci", "ssn"]: entities replaced by their labels in deltas and `completed` (docs/formatting.md). */
          redact: redactList.optional(),
          ...diarizeSettings,
        })
        .optional(),
    })
    .strict(),
});

export const clientMessage = z.discriminatedUnion("type", [
  z.object({ type: z.literal("input_audio_buffer.commit"), event_id: clientEventId }),
  z.object({ type: z.literal("input_audio_buffer.clear"), event_id: clientEventId }),
  sessionUpdate,
  /** Graceful close: the server flushes the open utterance, delivers pending transcripts, then closes 1000. */
  z.object({ type: z.literal("session.close"), event_id: clientEventId }),
]);
export type ClientMessage = z.infer<typeof clientMessage>;
export type SessionUpdate = z.infer<typeof sessionUpdate>;

// ---------------------------------------------------------------- server events

/**
 * A resume credential and how long the session waits for it (docs/realtime-resume.md):
 * `credential` is single use; each session.resumed hands out
 * the next one.
 */
export const resumeOffer = z.object({
  credential: z.string().startsWith("rs_"),
  grace_seconds: z.number().int().positive(),
});

/** session.created, exactly the fields of spec 6.1 (plus the VAD settings in turn_detection). */
export const sessionCreated = z.object({
  type: z.literal("session.created"),
  request_id: z.string(),
  session_id: z.string().startsWith("sess_"),
  audio: z.object({
    format: z.literal("pcm_s16le"),
    sample_rate: z.number().int(),
    channels: z.number().int(),
    /** True when each channel is transcribed on its own (`multichannel=true`); absent otherwise. */
    multichannel: z.boolean().optional(),
  }),
  turn_detection: turnDetection,
  plan: z.string(),
  limits: z.object({
    max_concurrent_utterances: z.number().int(),
    max_session_seconds: z.number().int(),
    idle_timeout_seconds: z.number().int(),
    remaining_audio_seconds: z.number().int(),
  }),
  /** Whether and how this session streams (an addition to spec 6.1's fields). */
  input_audio_transcription: streamingSettings.optional(),
  /** The turn_detection types this session may switch to (an addition): semantic_vad needs a streaming engine. */
  turn_detection_types: z.array(z.enum(TURN_DETECTION_TYPES)).optional(),
  /** How to resume this session after a lost connection (an addition; absent when the gateway has no token secret). */
  resume: resumeOffer.optional(),
});
export type SessionCreated = z.infer<typeof sessionCreated>;

/**
 * A resumed connection's first event: where the session's audio stands (`audio_ms`
 * at the session's sample rate: the client sends audio from there on), how many stored
 * events follow before the live ones, and the next resume credential.
 */
const sessionResumed = z.object({
  type: z.literal("session.resumed"),
  event_id: z.string(),
  session_id: z.string().startsWith("sess_"),
  audio_ms: z.number().int().nonnegative(),
  replayed: z.number().int().nonnegative(),
  resume: resumeOffer,
});

/**
 * `channel`: a multichannel session's (`?channels=2&multichannel=true`, docs/realtime-reference.md
 * "Multichannel") item events say which channel the item was spoken on; absent otherwise.
 * So do the `cleared` and `error` events a channel's lane sends (not the gateway's own).
 */
const channel = z.number().int().nonnegative().optional();
const itemBase = { event_id: z.string(), item_id: z.string(), channel };

const speechStarted = z.object({
  type: z.literal("input_audio_buffer.speech_started"),
  ...itemBase,
  audio_start_ms: z.number().int().nonnegative(),
});
const speechStopped = z.object({
  type: z.literal("input_audio_buffer.speech_stopped"),
  ...itemBase,
  audio_end_ms: z.number().int().nonnegative(),
});
const committed = z.object({
  type: z.literal("input_audio_buffer.committed"),
  ...itemBase,
  previous_item_id: z.string().nullable(),
  audio_start_ms: z.number().int().nonnegative(),
  audio_end_ms: z.number().int().nonnegative(),
  /** "vad" (silence after speech), "commit" (client), "max_length" or "close". */
  reason: z.enum(["vad", "commit", "max_length", "close"]),
});
const cleared = z.object({ type: z.literal("input_audio_buffer.cleared"), event_id: z.string(), channel });
/**
 * Opt-in (`turn_detection.early_turn_events`, semantic_vad): the decider first thinks the
 * open item's turn may be over (speech paused at `audio_end_ms`; `transcript` is the
 * running hypothesis). A voice agent may start preparing its answer; `committed` (the
 * turn is over) or `turn_resumed` (it is not) follows.
 */
const turnEndLikely = z.object({
  type: z.literal("input_audio_buffer.turn_end_likely"),
  ...itemBase,
  audio_end_ms: z.number().int().nonnegative(),
  transcript: z.string(),
});
/** After `turn_end_likely`: speech went on in the same item at `audio_start_ms`. */
const turnResumed = z.object({
  type: z.literal("input_audio_buffer.turn_resumed"),
  ...itemBase,
  audio_start_ms: z.number().int().nonnegative(),
});

const transcriptionDelta = z.object({
  type: z.literal("conversation.item.input_audio_transcription.delta"),
  ...itemBase,
  content_index: z.literal(0),
  delta: z.string(),
});
/**
 * Opt-in (`input_audio_transcription.interim_results: true`): the decoder's whole running
 * hypothesis of the open item, replacing the previous interim (like Deepgram's
 * `is_final: false`). Unstable; `delta` (append-only) and `completed` are authoritative.
 */
const transcriptionInterim = z.object({
  type: z.literal("conversation.item.input_audio_transcription.interim"),
  ...itemBase,
  content_index: z.literal(0),
  transcript: z.string(),
});
const transcriptionCompleted = z.object({
  type: z.literal("conversation.item.input_audio_transcription.completed"),
  ...itemBase,
  content_index: z.literal(0),
  transcript: z.string(),
  language: z.string(),
  audio_start_ms: z.number().int().nonnegative(),
  audio_end_ms: z.number().int().nonnegative(),
  /** With `diarize`: who spoke the item (most of it), `speaker_<n>` in order of first appearance; labels sent never change. */
  speaker: z.string().optional(),
  /** Its role, where `speaker_roles` names that speaker. */
  speaker_role: z.string().optional(),
  /** Word timings in milliseconds on the session's audio timeline; `speaker` on each word where the item holds a change of speaker. */
  words: z.array(
    z.object({ word: z.string(), start_ms: z.number().int(), end_ms: z.number().int(), probability: transcriptWord.shape.probability, punctuated_word: z.string().optional(), entity: transcriptWord.shape.entity, speaker: z.string().optional(), channel }),
  ),
  worker_id: z.string(),
  fallback_used: z.boolean(),
  /** Milliseconds spent in the worker(s); the rest of the latency is ours. */
  worker_ms: z.number().int().nonnegative(),
  /** Milliseconds the utterance waited for a transcription slot (stored command → router call). */
  queue_ms: z.number().int().nonnegative(),
});
/**
 * With `diarize`: later audio showed that two labels are one person. `from` (a label given
 * earlier) is folded into `into` (an earlier one): items already sent keep their labels,
 * later items carry `into`. Said once per folded label, before the `completed` of the item
 * whose labelling folded it (`item_id`).
 */
const speakerMerged = z.object({
  type: z.literal("conversation.speaker.merged"),
  ...itemBase,
  from: z.string(),
  into: z.string(),
});
const transcriptionFailed = z.object({
  type: z.literal("conversation.item.input_audio_transcription.failed"),
  ...itemBase,
  content_index: z.literal(0),
  error: z.object({ type: z.string(), code: z.string(), message: z.string() }),
});
const errorEvent = z.object({
  type: z.literal("error"),
  event_id: z.string(),
  channel,
  error: z.object({
    type: z.enum(["invalid_request_error", "server_error"]),
    code: z.string(),
    message: z.string(),
    /** The client event_id this error answers, when it had one. */
    event_id: z.string().nullable(),
    /** A client message that did not parse: the path of the field at fault ("session.input_audio_transcription.keyterms"). */
    param: z.string().optional(),
  }),
});
/** A session's transcription settings as session.updated shows them and the start/update controls carry them to the VAD. */
export const transcriptionSettings = {
  language: z.string().nullable(),
  prompt: z.string().nullable(),
  model: z.string().nullable(),
  /** The session's keyterms (session.update or `?keyterms=`); absent or empty: none. */
  keyterms: z.array(z.string()).optional(),
  partial_interval_ms: partialIntervalMs.optional(),
  interim_results: z.boolean().optional(),
  smart_format: z.boolean().optional(),
  redact: z.array(z.enum(REDACT_ENTITIES)).optional(),
  ...diarizeSettings,
};

const sessionUpdated = z.object({
  type: z.literal("session.updated"),
  event_id: z.string(),
  session: z.object({
    turn_detection: turnDetection,
    input_audio_transcription: z.object({
      ...transcriptionSettings,
    }),
  }),
});

export const serverEvent = z.discriminatedUnion("type", [
  sessionCreated,
  sessionResumed,
  sessionUpdated,
  speechStarted,
  speechStopped,
  committed,
  cleared,
  turnEndLikely,
  turnResumed,
  transcriptionDelta,
  transcriptionInterim,
  transcriptionCompleted,
  transcriptionFailed,
  speakerMerged,
  errorEvent,
]);
export type ServerEvent = z.infer<typeof serverEvent>;
export type ServerEventOf<T extends ServerEvent["type"]> = Extract<ServerEvent, { type: T }>;

// ---------------------------------------------------------------- close codes (spec 7.3)

export const CLOSE = {
  normal: { code: 1000, reason: "" },
  sessionAudioLimit: { code: 1008, reason: "session_audio_limit" },
  audioQuotaExhausted: { code: 1008, reason: "audio_quota_exhausted" },
  sessionDurationLimit: { code: 1008, reason: "session_duration_limit" },
  keyRevoked: { code: 1008, reason: "key_revoked" },
  frameTooLarge: { code: 1009, reason: "frame_too_large" },
  clientError: { code: 1011, reason: "client_error" },
  upstreamUnavailable: { code: 1013, reason: "upstream_unavailable" },
  upstreamBackpressure: { code: 1013, reason: "upstream_backpressure" },
  clientBackpressure: { code: 1013, reason: "client_backpressure" },
  idleTimeout: { code: 4408, reason: "idle_timeout" },
  /** A resume took the session over (docs/realtime-resume.md): this connection no longer drives it. */
  sessionTakenOver: { code: 4409, reason: "session_taken_over" },
  /** The gateway is restarting and held the session: resume it (on any gateway). */
  gatewayRestarting: { code: 1012, reason: "gateway_restarting" },
} as const;
export type CloseReason = (typeof CLOSE)[keyof typeof CLOSE];
