import { z } from "@hono/zod-openapi";
import { safeString } from "./safe-string";
import { keytermsJson } from "./keyterms";

/**
 * Client secrets (`ek_…`) as OpenAI issues them: the GA `POST /v1/realtime/client_secrets`
 * and the beta `POST /v1/realtime/transcription_sessions` (shapes checked against the
 * openai SDK's resources/realtime/client-secrets.d.ts and
 * resources/beta/realtime/transcription-sessions.d.ts). Only transcription sessions are
 * served. Unknown fields are dropped, so what a secret carries stays small.
 */

/** Lifetime of a client secret in seconds: OpenAI's default and bounds. */
export const CLIENT_SECRET_TTL = { defaultSeconds: 600, minSeconds: 10, maxSeconds: 7200 } as const;

const ttlSeconds = z
  .number()
  .int()
  .min(CLIENT_SECRET_TTL.minSeconds)
  .max(CLIENT_SECRET_TTL.maxSeconds)
  .describe(`seconds from creation; ${CLIENT_SECRET_TTL.minSeconds}..${CLIENT_SECRET_TTL.maxSeconds}, default ${CLIENT_SECRET_TTL.defaultSeconds}`);

const expiresAfter = z.object({ anchor: z.literal("created_at").optional(), seconds: ttlSeconds.optional() });

const transcription = z.object({
  model: safeString(64).optional().describe("accepted for compatibility; the service's configured engine transcribes"),
  language: z
    .string()
    .regex(/^[a-zA-Z]{2,3}([-_][a-zA-Z0-9]{2,8})?$/, "an ISO-639-1 code such as 'en'")
    .optional(),
  prompt: safeString(1000).optional(),
  keywords: keytermsJson.optional(),
});

const noiseReduction = z.object({ type: z.enum(["near_field", "far_field"]).optional() });

const millis = z.number().int().min(0).max(10_000);
const serverVad = z.object({
  type: z.literal("server_vad"),
  threshold: z.number().min(0).max(1).optional(),
  prefix_padding_ms: millis.optional(),
  silence_duration_ms: millis.optional(),
  idle_timeout_ms: z.number().int().min(0).max(3_600_000).nullable().optional(),
  create_response: z.boolean().optional(),
  interrupt_response: z.boolean().optional(),
});
const semanticVad = z.object({
  type: z.literal("semantic_vad"),
  eagerness: z.enum(["low", "medium", "high", "auto"]).optional(),
  create_response: z.boolean().optional(),
  interrupt_response: z.boolean().optional(),
});
const turnDetection = z.discriminatedUnion("type", [serverVad, semanticVad]);

const audioFormat = z.object({ type: z.enum(["audio/pcm", "audio/pcmu", "audio/pcma"]).optional(), rate: z.literal(24000).optional() });

/**
 * The session configuration a client secret carries (GA shape; beta requests are
 * converted to it). The door applies it as the initial configuration of every session
 * opened with the secret.
 */
export const transcriptionSessionPreset = z
  .object({
    type: z.literal("transcription", { error: "only transcription sessions are served: session.type must be 'transcription'" }),
    audio: z
      .object({
        input: z
          .object({
            format: audioFormat.optional(),
            transcription: transcription.optional(),
            noise_reduction: noiseReduction.nullable().optional(),
            turn_detection: turnDetection.nullable().optional(),
          })
          .optional(),
      })
      .optional(),
    include: z.array(z.literal("item.input_audio_transcription.logprobs")).optional(),
  })
  .openapi("TranscriptionSessionConfig");
export type TranscriptionSessionPreset = z.infer<typeof transcriptionSessionPreset>;

export const clientSecretRequest = z
  .object({
    expires_after: expiresAfter.optional(),
    session: transcriptionSessionPreset.optional(),
  })
  .openapi("ClientSecretCreateRequest");

const effectiveInput = z.object({
  format: audioFormat,
  transcription: transcription.nullable(),
  noise_reduction: noiseReduction.nullable(),
  turn_detection: turnDetection.nullable(),
});

export const clientSecretResponse = z
  .object({
    value: z.string().describe("`ek_…`: reusable until expires_at; give it to the browser or device"),
    expires_at: z.number().int().describe("epoch seconds"),
    session: z.object({
      id: z.string().describe("informational: each connection made with the secret gets its own session id"),
      object: z.literal("realtime.transcription_session"),
      type: z.literal("transcription"),
      expires_at: z.number().int(),
      audio: z.object({ input: effectiveInput }),
      include: z.array(z.string()).nullable(),
    }),
  })
  .openapi("ClientSecretCreateResponse");

export const betaTranscriptionSessionRequest = z
  .object({
    input_audio_format: z.enum(["pcm16", "g711_ulaw", "g711_alaw"]).optional(),
    input_audio_transcription: transcription.nullable().optional(),
    input_audio_noise_reduction: noiseReduction.nullable().optional(),
    turn_detection: turnDetection.nullable().optional(),
    include: z.array(z.literal("item.input_audio_transcription.logprobs")).optional(),
    modalities: z.array(z.enum(["text", "audio"])).optional(),
    client_secret: z.object({ expires_at: expiresAfter.optional() }).optional(),
  })
  .openapi("TranscriptionSessionCreateRequest");
export type BetaTranscriptionSessionRequest = z.infer<typeof betaTranscriptionSessionRequest>;

export const betaTranscriptionSessionResponse = z
  .object({
    id: z.string(),
    object: z.literal("realtime.transcription_session"),
    expires_at: z.number().int(),
    input_audio_format: z.enum(["pcm16", "g711_ulaw", "g711_alaw"]),
    input_audio_transcription: transcription.nullable(),
    input_audio_noise_reduction: noiseReduction.nullable(),
    turn_detection: turnDetection.nullable(),
    include: z.array(z.string()).nullable(),
    modalities: z.array(z.enum(["text", "audio"])),
    client_secret: z.object({ value: z.string().describe("`ek_…`"), expires_at: z.number().int() }),
  })
  .openapi("TranscriptionSession");
