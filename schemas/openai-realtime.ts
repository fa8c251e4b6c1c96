import { z } from "zod";
import { resumeOffer, speakerCount, speakerRoles } from "./realtime";
import { keytermsJson } from "./keyterms";

/**
 * The OpenAI Realtime door's wire contract (`WS /v1/realtime`, docs/realtime.md "The
 * OpenAI Realtime door"): the client events of OpenAI's transcription sessions, GA and
 * the older beta shapes, as the `openai` SDK 6 types them (resources/realtime/realtime.ts,
 * resources/beta/realtime/realtime.ts), and the server events the door sends. The door
 * translates them to and from the native events (schemas/realtime.ts); one session
 * implementation serves both.
 *
 * Nested objects are not strict: a field OpenAI added later (SDK 7's `keywords`) is
 * ignored rather than refused, so a newer client still connects.
 */

export const OPENAI_REALTIME_PATH = "/v1/realtime";
/** Offered by beta browser clients (with `realtime`); the Node beta client sends `OpenAI-Beta: realtime=v1`. */
export const OPENAI_BETA_SUBPROTOCOL = "openai-beta.realtime-v1";
export const LOGPROBS_INCLUDE = "item.input_audio_transcription.logprobs";
/**
 * The largest text frame the door reads: an `input_audio_buffer.append` of 15 MiB of
 * base64 (OpenAI's documented limit per event) and its JSON. Above it: close 1009.
 */
export const OPENAI_MAX_TEXT_FRAME_BYTES = 16 * 1024 * 1024;
/** An `?intent` other than `transcription`: an `error` event `invalid_value`, then this close (OpenAI's own). */
export const OPENAI_INTENT_CLOSE = { code: 4000, reason: "invalid_request_error.invalid_value" } as const;

// ---------------------------------------------------------------- session config

const BETA_FORMATS = ["pcm16", "g711_ulaw", "g711_alaw"] as const;
/** `audio/pcm` is 24 kHz only, as upstream ("Only a 24kHz sample rate is supported"). */
const gaFormat = z.discriminatedUnion("type", [
  z.object({ type: z.literal("audio/pcm"), rate: z.literal(24000).optional() }),
  z.object({ type: z.literal("audio/pcmu") }),
  z.object({ type: z.literal("audio/pcma") }),
]);

const languageCode = z.string().regex(/^[a-zA-Z]{2,3}([-_][a-zA-Z0-9]{2,8})?$/);
const transcription = z
  .object({
    model: z.string().max(100).optional(),
    /** ISO-639-1 */
    language: languageCode.optional(),
    prompt: z.string().max(2000).refine((s) => !/[\u0000]/.test(s), "must not contain NUL").optional(),
    /** How long transcripts may lag behind speech: our partial interval and semantic_vad eagerness (openai-config.ts DELAY). */
    delay: z.enum(["minimal", "low", "medium", "high", "xhigh"]).optional(),
    /** Words and phrases recognition favours: the native `keyterms` (schemas/keyterms.ts). */
    keywords: keytermsJson.optional(),
    /** Languages expected; the first is the engines' language hint, as `language` is (which wins when both are given). */
    languages: z.array(languageCode).min(1).max(10).optional(),
    /** Extensions OpenAI clients do not send: live speaker labels (`speaker` on each completed item), the count if known and the speakers' roles, as the native settings (docs/diarization.md). */
    diarize: z.boolean().optional(),
    speakers: speakerCount.optional(),
    max_speakers: speakerCount.optional(),
    speaker_roles: speakerRoles.optional(),
  })
  .nullable();
export type OpenAiTranscription = z.infer<typeof transcription>;

const eagerness = z.enum(["low", "medium", "high", "auto"]);
const serverVad = z.object({
  type: z.literal("server_vad"),
  threshold: z.number().min(0).max(1).optional(),
  prefix_padding_ms: z.number().int().min(0).optional(),
  silence_duration_ms: z.number().int().min(0).optional(),
  idle_timeout_ms: z.number().int().nullable().optional(),
  create_response: z.boolean().optional(),
  interrupt_response: z.boolean().optional(),
});
const semanticVad = z.object({
  type: z.literal("semantic_vad"),
  eagerness: eagerness.optional(),
  create_response: z.boolean().optional(),
  interrupt_response: z.boolean().optional(),
});
const turnDetection = z.discriminatedUnion("type", [serverVad, semanticVad]).nullable();
/** Beta turn detection: `type` may be left out (server_vad). */
const betaTurnDetection = z
  .object({
    type: z.enum(["server_vad", "semantic_vad"]).optional(),
    threshold: z.number().min(0).max(1).optional(),
    prefix_padding_ms: z.number().int().min(0).optional(),
    silence_duration_ms: z.number().int().min(0).optional(),
    eagerness: eagerness.optional(),
    create_response: z.boolean().optional(),
    interrupt_response: z.boolean().optional(),
  })
  .nullable();

const noiseReduction = z.object({ type: z.enum(["near_field", "far_field"]).optional() }).nullable();
export type OpenAiNoiseReduction = z.infer<typeof noiseReduction>;
const include = z.array(z.literal(LOGPROBS_INCLUDE)).nullable();

const clientEventId = z.string().max(128).optional();

/** GA `session.update`; `session.type` other than `transcription` is refused by the door (a conversation session). */
const sessionUpdate = z.object({
  type: z.literal("session.update"),
  event_id: clientEventId,
  session: z.object({
    type: z.string(),
    audio: z
      .object({
        input: z
          .object({
            format: gaFormat.optional(),
            transcription: transcription.optional(),
            turn_detection: turnDetection.optional(),
            noise_reduction: noiseReduction.optional(),
          })
          .optional(),
      })
      .optional(),
    include: include.optional(),
  }),
});
export type OpenAiSessionUpdate = z.infer<typeof sessionUpdate>;

/** Beta `transcription_session.update`: flat fields. */
const transcriptionSessionUpdate = z.object({
  type: z.literal("transcription_session.update"),
  event_id: clientEventId,
  session: z.object({
    input_audio_format: z.enum(BETA_FORMATS).optional(),
    input_audio_transcription: transcription.optional(),
    turn_detection: betaTurnDetection.optional(),
    input_audio_noise_reduction: noiseReduction.optional(),
    include: include.optional(),
    modalities: z.array(z.string()).optional(),
  }),
});
export type OpenAiTranscriptionSessionUpdate = z.infer<typeof transcriptionSessionUpdate>;

export const openAiClientEvent = z.discriminatedUnion("type", [
  sessionUpdate,
  transcriptionSessionUpdate,
  z.object({ type: z.literal("input_audio_buffer.append"), event_id: clientEventId, audio: z.string() }),
  /** The same, by the name the live GA server also accepts. */
  z.object({ type: z.literal("session.input_audio_buffer.append"), event_id: clientEventId, audio: z.string() }),
  z.object({ type: z.literal("input_audio_buffer.commit"), event_id: clientEventId }),
  z.object({ type: z.literal("input_audio_buffer.clear"), event_id: clientEventId }),
  /** Accepted live upstream (not in SDK 6's union): flush, deliver pending transcripts, close 1000. */
  z.object({ type: z.literal("session.close"), event_id: clientEventId }),
]);
export type OpenAiClientEvent = z.infer<typeof openAiClientEvent>;
export const OPENAI_CLIENT_EVENT_TYPES = openAiClientEvent.options.map((o) => o.shape.type.value);
/** Client events of conversation sessions: known upstream, refused in a transcription session. */
export const CONVERSATION_EVENT_TYPES = [
  "conversation.item.create",
  "conversation.item.truncate",
  "conversation.item.delete",
  "conversation.item.retrieve",
  "response.create",
  "response.cancel",
  "output_audio_buffer.clear",
];

// ---------------------------------------------------------------- server events

const withId = { event_id: z.string() };
const gaTurnDetectionView = z
  .union([
    z.object({ type: z.literal("server_vad"), threshold: z.number(), prefix_padding_ms: z.number().int(), silence_duration_ms: z.number().int() }),
    z.object({ type: z.literal("semantic_vad"), eagerness }),
  ])
  .nullable();
const transcriptionView = z
  .object({
    model: z.string().optional(),
    language: z.string().optional(),
    prompt: z.string().optional(),
    delay: z.string().optional(),
    keywords: z.array(z.string()).optional(),
    languages: z.array(z.string()).optional(),
    diarize: z.boolean().optional(),
    speakers: z.number().int().optional(),
    max_speakers: z.number().int().optional(),
    speaker_roles: z.record(z.string(), z.string()).optional(),
  })
  .nullable();

/** The GA transcription session object, as `session.created` / `session.updated` show it. */
const openAiSessionView = z.object({
  type: z.literal("transcription"),
  object: z.literal("realtime.transcription_session"),
  id: z.string(),
  expires_at: z.number().int(),
  audio: z.object({
    input: z.object({
      format: gaFormat,
      transcription: transcriptionView,
      turn_detection: gaTurnDetectionView,
      noise_reduction: noiseReduction,
    }),
  }),
  include: include,
});
export type OpenAiSessionView = z.infer<typeof openAiSessionView>;

/** The beta transcription session object (`transcription_session.created` / `.updated`). */
const betaSessionView = z.object({
  id: z.string(),
  object: z.literal("realtime.transcription_session"),
  expires_at: z.number().int(),
  input_audio_format: z.enum(BETA_FORMATS),
  input_audio_transcription: transcriptionView,
  turn_detection: z
    .object({ type: z.enum(["server_vad", "semantic_vad"]), threshold: z.number().optional(), prefix_padding_ms: z.number().int().optional(), silence_duration_ms: z.number().int().optional(), eagerness: eagerness.optional() })
    .nullable(),
  input_audio_noise_reduction: noiseReduction,
  include: include,
  client_secret: z.null(),
});
export type BetaSessionView = z.infer<typeof betaSessionView>;

const conversationItem = z.object({
  id: z.string(),
  object: z.literal("realtime.item"),
  type: z.literal("message"),
  status: z.literal("completed"),
  role: z.literal("user"),
  content: z.array(z.object({ type: z.literal("input_audio"), transcript: z.string().nullable() })),
});
const logprob = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(z.number().int()) });
export type OpenAiLogprob = z.infer<typeof logprob>;
const errorBody = z.object({ type: z.string(), code: z.string().nullable(), message: z.string(), param: z.string().nullable(), event_id: z.string().nullable() });
export type OpenAiErrorBody = z.infer<typeof errorBody>;

export const openAiServerEvent = z.discriminatedUnion("type", [
  /** `resume`: an addition (docs/realtime-resume.md), the native session.created's resume offer. */
  z.object({ type: z.literal("session.created"), ...withId, session: openAiSessionView, resume: resumeOffer.optional() }),
  z.object({ type: z.literal("session.updated"), ...withId, session: openAiSessionView }),
  z.object({ type: z.literal("transcription_session.created"), ...withId, session: betaSessionView, resume: resumeOffer.optional() }),
  z.object({ type: z.literal("transcription_session.updated"), ...withId, session: betaSessionView }),
  z.object({ type: z.literal("input_audio_buffer.speech_started"), ...withId, item_id: z.string(), audio_start_ms: z.number().int() }),
  z.object({ type: z.literal("input_audio_buffer.speech_stopped"), ...withId, item_id: z.string(), audio_end_ms: z.number().int() }),
  z.object({ type: z.literal("input_audio_buffer.committed"), ...withId, item_id: z.string(), previous_item_id: z.string().nullable() }),
  z.object({ type: z.literal("input_audio_buffer.cleared"), ...withId }),
  z.object({ type: z.literal("conversation.item.added"), ...withId, previous_item_id: z.string().nullable(), item: conversationItem }),
  z.object({ type: z.literal("conversation.item.done"), ...withId, previous_item_id: z.string().nullable(), item: conversationItem }),
  z.object({ type: z.literal("conversation.item.created"), ...withId, previous_item_id: z.string().nullable(), item: conversationItem }),
  z.object({ type: z.literal("conversation.item.input_audio_transcription.delta"), ...withId, item_id: z.string(), content_index: z.literal(0), delta: z.string() }),
  z.object({
    type: z.literal("conversation.item.input_audio_transcription.completed"),
    ...withId,
    item_id: z.string(),
    content_index: z.literal(0),
    transcript: z.string(),
    usage: z.object({ type: z.literal("duration"), seconds: z.number().nonnegative() }),
    logprobs: z.array(logprob).optional(),
    /** Extensions: with `diarize`, who spoke the item (`speaker_<n>`; docs/diarization.md) and the role `speaker_roles` gives that speaker. */
    speaker: z.string().optional(),
    speaker_role: z.string().optional(),
  }),
  /** Not OpenAI's: with `diarize`, label `from` is folded into the earlier `into` (the native event; docs/diarization.md). */
  z.object({ type: z.literal("conversation.speaker.merged"), ...withId, item_id: z.string(), from: z.string(), into: z.string() }),
  z.object({
    type: z.literal("conversation.item.input_audio_transcription.failed"),
    ...withId,
    item_id: z.string(),
    content_index: z.literal(0),
    error: z.object({ type: z.string(), code: z.string().nullable(), message: z.string(), param: z.string().nullable() }),
  }),
  z.object({ type: z.literal("error"), ...withId, error: errorBody }),
  /** Not OpenAI's: the first event of a resumed connection, the native session.resumed (`audio_ms` in ms: resend from there on at the door's format). */
  z.object({ type: z.literal("session.resumed"), ...withId, session_id: z.string(), audio_ms: z.number().int().nonnegative(), replayed: z.number().int().nonnegative(), resume: resumeOffer }),
]);
export type OpenAiServerEvent = z.infer<typeof openAiServerEvent>;

// ---------------------------------------------------------------- resume

/**
 * What a resume of a door session restores on any gateway (the `door` field of the
 * session's ownership entry, KV bucket `leases`): the door's config, whether it speaks
 * beta shapes, and when the session expires (shown in its session views).
 */
export const doorRecord = z.object({
  config: z.object({
    format: z.enum(["pcm", "pcmu", "pcma"]),
    transcription,
    turnDetection: gaTurnDetectionView,
    noiseReduction,
    include,
  }),
  beta: z.boolean(),
  expiresAt: z.number().int(),
});
export type DoorRecord = z.infer<typeof doorRecord>;
