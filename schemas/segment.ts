import { z as zo } from "@hono/zod-openapi";
import { z } from "zod";
import { envelopeOf } from "./envelope";
import { KEYTERMS_DESCRIPTION } from "./keyterms";
import { safeString } from "./safe-string";
import { verboseTranscription } from "./transcription";

/**
 * Segment plane schemas: the audit events of POST /v1/audio/transcriptions, the
 * worker registry entries and the NATS request/reply messages between the router
 * and the worker service.
 */

// ---- HTTP: POST /v1/audio/transcriptions (multipart form fields) ----

/** `diarized_json`: OpenAI's diarized shape (segments with a `speaker` "A", "B", …); it implies `diarize=true`. */
export const segmentResponseFormat = z.enum(["verbose_json", "json", "text", "srt", "vtt", "diarized_json"]);

/**
 * The text fields of the multipart form, parsed after the file is taken out. `model`,
 * `language` and `prompt` reach the SegmentTranscribed/SegmentFailed audit events and the
 * workers, so they are safeStrings (400 `invalid_string`, schemas/safe-string.ts).
 */
export const segmentFields = z.object({
  model: safeString(128).default("stt-1").describe("model name passed to workers"),
  language: safeString(16)
    .regex(/^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?$/, "an ISO-639-1 code such as `en`")
    .optional()
    .describe("ISO-639-1 hint"),
  prompt: safeString(16000).optional().describe("context prompt / vocabulary hint (at most 16000 characters; the first 4000 are used)"),
  response_format: segmentResponseFormat.default("verbose_json"),
  worker_id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, "letters, digits, - and _").optional().describe("pin to a specific worker"),
});

/** The whole form, for the OpenAPI document. */
export const segmentForm = zo
  .object({
    ...segmentFields.shape,
    file: zo.string().openapi({ type: "string", format: "binary", description: "the speech clip: WAV, MP3, FLAC, OGG/Opus, M4A, WebM, …" }),
    stream: zo.enum(["true", "false"]).optional().describe("true: server-sent transcript.text.delta / transcript.text.done events (OpenAI's shape)"),
    smart_format: zo
      .enum(["true", "false"])
      .optional()
      .describe("default true: punctuation, capitals and numerals (\"25%\", \"$300\", \"3:30 p.m.\") for engines whose text lacks them; words gain punctuated_word. false: the words as recognised"),
    redact: zo
      .string()
      .optional()
      .describe("entities to replace by their labels in text, segments, words, SRT/VTT: pci, ssn, phone, email, numbers, pii; comma-separated or repeated (docs/formatting.md)"),
    multichannel: zo
      .enum(["true", "false"])
      .optional()
      .describe(
        "default false. true: each audio channel (at most 8; more is 400 too_many_channels) is transcribed on its own: `channels[]` holds each channel's text, segments and words, and the top-level text, segments and words are all channels merged in time order, each segment and word carrying its `channel`; SRT cues start `[Channel N] `, WebVTT cues carry a voice tag `<v Channel N>`. Billed per channel (a 10 s stereo clip is 20 audio seconds). A mono clip is one channel, 0. Not with stream=true (400 unsupported_combination)",
      ),
    keyterms: zo.string().optional().describe(`${KEYTERMS_DESCRIPTION}. Comma-separated, repeated (\`keyterms\` or \`keyterms[]\`), or a JSON array of strings; a bad value is 400 invalid_request with param \`keyterms\``),
    "timestamp_granularities[]": zo.array(zo.enum(["word", "segment"])).optional().describe("verbose_json: words only when `word` is asked for; both when absent"),
    "include[]": zo.array(zo.string()).optional().describe("no values are supported: any is 400 unsupported_include"),
    diarize: zo
      .enum(["true", "false"])
      .optional()
      .describe("true: speaker labels (docs/diarization.md): words and segments carry `speaker` (0, 1, …), segments are split at speaker turns, SRT/VTT cues name the speaker; implied by response_format=diarized_json"),
    speakers: zo.string().optional().describe("with diarize: exactly this many speakers (1–10); default: estimated"),
    min_speakers: zo.string().optional().describe("with diarize: at least this many speakers (1–10)"),
    max_speakers: zo.string().optional().describe("with diarize: at most this many speakers (1–10)"),
  })
  .openapi("SegmentTranscriptionForm");

// ---- audit events (stream topology.streams.segments, subject segmentEvent(keyId)) ----

const segmentCommon = {
  requestId: z.string(),
  keyId: z.string(),
  ownerId: z.string(),
  model: z.string(),
  audioSeconds: z.number().nonnegative(),
  /** Bytes of the uploaded file. */
  bytes: z.number().int().nonnegative(),
  responseFormat: z.string(),
};

const segmentTranscribed = z.object({
  type: z.literal("SegmentTranscribed"),
  data: z.object({
    ...segmentCommon,
    workerId: z.string(),
    fallbackUsed: z.boolean(),
    workerMs: z.number().nonnegative(),
    totalMs: z.number().nonnegative(),
    textChars: z.number().int().nonnegative(),
  }),
});

const segmentFailed = z.object({
  type: z.literal("SegmentFailed"),
  data: z.object({
    ...segmentCommon,
    code: z.string(),
    message: z.string(),
    totalMs: z.number().nonnegative(),
  }),
});

const segmentEvent = z.discriminatedUnion("type", [segmentTranscribed, segmentFailed]);
export type SegmentEvent = z.infer<typeof segmentEvent>;
export const segmentEnvelope = envelopeOf(segmentEvent);

// ---- worker registry (KV bucket topology.buckets.workers, key = worker id) ----

export const workerAnnouncement = z.object({
  id: z.string(),
  kind: z.string(),
  models: z.array(z.string()),
  warm: z.boolean(),
  inFlight: z.number().int().nonnegative(),
  concurrency: z.number().int().positive(),
  /** Expected processing seconds per audio second. */
  realTimeFactor: z.number().positive(),
  /** ISO-639-1 codes the engine transcribes; "*" = any. */
  languages: z.array(z.string()).default(["*"]),
  /**
   * What the worker carries (shared/workers/registry.ts `announcedCapacity`): `requests`
   * clips at once, and `streams` real-time streams of continuous speech
   * (concurrency ÷ real-time factor). Optional: older workers do not send it and
   * readers derive it from concurrency and real-time factor.
   */
  capacity: z.object({ requests: z.number().int().nonnegative(), streams: z.number().nonnegative() }).optional(),
  /**
   * True when the engine's text is already punctuated and cased (whisper.cpp,
   * OpenAI-compatible servers); false for engines whose words need the smart-format
   * stage (PocketSphinx). Absent (older workers): decided by `kind`.
   */
  formatsText: z.boolean().optional(),
  host: z.string(),
  /** ms since epoch of this heartbeat. */
  at: z.number(),
});
export type WorkerAnnouncement = z.infer<typeof workerAnnouncement>;

// ---- worker request/reply (core NATS, topology.subjects.workerRequest / workerAny) ----

/**
 * Request header, JSON, framed before the PCM: [u32 LE header length][header][PCM16].
 * When the clip exceeds the server's max payload, `pullSubject` names a subject
 * the worker requests the audio from in pieces (`{offset}` → bytes).
 */
export const workerRequestHeader = z.object({
  requestId: z.string(),
  model: z.string().optional(),
  language: z.string().optional(),
  prompt: z.string().optional(),
  keyterms: z.array(z.string()).optional(),
  samples: z.number().int().nonnegative(),
  pullSubject: z.string().optional(),
  /** ms since epoch after which the router no longer waits; the worker may skip the work. */
  deadline: z.number().optional(),
  /** A partial re-decode of an open realtime item: the engine may decode it cheaper. */
  partial: z.boolean().optional(),
});
export type WorkerRequestHeader = z.infer<typeof workerRequestHeader>;

export const workerReply = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), workerId: z.string(), result: verboseTranscription }),
  z.object({ ok: z.literal(false), workerId: z.string(), code: z.string(), message: z.string() }),
]);
export type WorkerReply = z.infer<typeof workerReply>;
