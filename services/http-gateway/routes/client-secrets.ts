import { randomBytes } from "node:crypto";
import { createRoute, type OpenAPIHono } from "@hono/zod-openapi";
import type { z } from "@hono/zod-openapi";
import { issueClientSecret } from "../../../domain/keys/client-secret";
import {
  betaTranscriptionSessionRequest,
  betaTranscriptionSessionResponse,
  CLIENT_SECRET_TTL,
  clientSecretRequest,
  clientSecretResponse,
  type BetaTranscriptionSessionRequest,
  type TranscriptionSessionPreset,
} from "../../../schemas/client-secrets";
import { openAiError } from "../../../schemas/http";
import { issueErrorCode } from "../../../schemas/safe-string";
import type { Config } from "../../../shared/config";
import { validationError } from "../../../shared/errors";
import { limitRequests, requireApiKey, type GatewayEnv } from "../auth-middleware";
import type { GatewayDeps } from "../deps";
import { readOptionalJson } from "./admin";

const CLIENT_SECRETS_PATH = "/v1/realtime/client_secrets";
const TRANSCRIPTION_SESSIONS_PATH = "/v1/realtime/transcription_sessions";

const ttlDoc = `Valid ${CLIENT_SECRET_TTL.defaultSeconds} s by default (${CLIENT_SECRET_TTL.minSeconds}..${CLIENT_SECRET_TTL.maxSeconds} s)`;
const secretDoc = `${ttlDoc}, HMAC-signed (nothing is stored), bound to the issuing key (revoking or expiring the key refuses its secrets) and reusable until it expires: each WebSocket connection made with it is admitted and counted against the key's plan like any other. Present it as \`Authorization: Bearer ek_…\` or, from a browser, as the subprotocol \`openai-insecure-api-key.ek_…\` (with \`realtime\`); never in a URL. The session configuration given here is carried by the secret and applied to the sessions opened with it on /v1/realtime; the client may change it with session.update.`;

const responses = (ok: z.ZodType, what: string) => ({
  200: { description: what, content: { "application/json": { schema: ok } } },
  400: { description: "invalid body (`invalid_request`, with `param`)", content: { "application/json": { schema: openAiError } } },
  401: { description: "authentication failed (an sk- key is required)", content: { "application/json": { schema: openAiError } } },
  429: { description: "`rate_limit_exceeded`: the key's maxRequestsPerMinute is used up (`Retry-After`)", content: { "application/json": { schema: openAiError } } },
  503: { description: "`token_issuer_unavailable`: GATEWAY_SESSION_TOKEN_SECRET is not set", content: { "application/json": { schema: openAiError } } },
});

function parseBody<T extends z.ZodType>(schema: T, value: unknown): z.infer<T> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = issue.path.join(".") || undefined;
    throw validationError(issueErrorCode(issue, "invalid_request"), `${param ?? "body"}: ${issue.message}`, { param });
  }
  return parsed.data;
}

const BETA_FORMATS = { pcm16: { type: "audio/pcm", rate: 24000 }, g711_ulaw: { type: "audio/pcmu" }, g711_alaw: { type: "audio/pcma" } } as const;

/** The beta request's flat fields as the GA session configuration a secret carries. */
function presetFromBeta(body: BetaTranscriptionSessionRequest): TranscriptionSessionPreset {
  const input: NonNullable<NonNullable<TranscriptionSessionPreset["audio"]>["input"]> = {};
  if (body.input_audio_format) input.format = BETA_FORMATS[body.input_audio_format];
  if (body.input_audio_transcription) input.transcription = body.input_audio_transcription;
  if (body.input_audio_noise_reduction !== undefined) input.noise_reduction = body.input_audio_noise_reduction;
  if (body.turn_detection !== undefined) input.turn_detection = body.turn_detection;
  return { type: "transcription", ...(Object.keys(input).length ? { audio: { input } } : {}), ...(body.include ? { include: body.include } : {}) };
}

/** The session a secret opens: its configuration over the service's defaults. */
function effectiveInput(config: Config, preset: TranscriptionSessionPreset | undefined) {
  const input = preset?.audio?.input ?? {};
  const vad = config.realtime.vad;
  return {
    format: input.format ?? { type: "audio/pcm" as const, rate: 24000 as const },
    transcription: input.transcription ?? null,
    noise_reduction: input.noise_reduction ?? null,
    turn_detection:
      input.turn_detection !== undefined
        ? input.turn_detection
        : { type: "server_vad" as const, threshold: vad.threshold, prefix_padding_ms: vad.prefixPaddingMs, silence_duration_ms: vad.silenceMs },
  };
}

const newSessionId = () => `sess_${randomBytes(12).toString("hex")}`;

const BETA_FORMAT_NAMES = { "audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw" } as const;

/**
 * OpenAI's client secrets (`ek_…`): `POST /v1/realtime/client_secrets` (GA) and
 * `POST /v1/realtime/transcription_sessions` (beta), both with an sk- key and counted
 * like the other request routes. Bodies are parsed by hand so that an empty one means
 * "all defaults" (as the SDK's `create()` without arguments sends `{}`, curl sends nothing).
 */
export function registerClientSecretRoutes(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  const issue = (principal: Parameters<typeof issueClientSecret>[1], seconds: number | undefined, preset: TranscriptionSessionPreset | undefined) =>
    issueClientSecret(deps.config.auth.sessionTokenSecret, principal, deps.now(), seconds ?? CLIENT_SECRET_TTL.defaultSeconds, preset);

  app.use(CLIENT_SECRETS_PATH, requireApiKey(deps), limitRequests(deps));
  app.openAPIRegistry.registerPath(
    createRoute({
      method: "post",
      path: CLIENT_SECRETS_PATH,
      tags: ["realtime"],
      summary: "Create a realtime client secret (ek_) with a transcription session configuration",
      description: `OpenAI's GA client secret. ${secretDoc} Only \`session.type: "transcription"\` is served.`,
      security: [{ bearerAuth: [] }],
      request: { body: { required: false, content: { "application/json": { schema: clientSecretRequest } } } },
      responses: responses(clientSecretResponse, "the secret and the effective session configuration"),
    }),
  );
  app.post(CLIENT_SECRETS_PATH, async (c) => {
    const body = parseBody(clientSecretRequest, readOptionalJson(await c.req.text()));
    const { value, expiresAt } = issue(c.get("principal"), body.expires_after?.seconds, body.session);
    c.header("Cache-Control", "no-store");
    return c.json(
      clientSecretResponse.parse({
        value,
        expires_at: expiresAt,
        session: {
          id: newSessionId(),
          object: "realtime.transcription_session",
          type: "transcription",
          expires_at: expiresAt,
          audio: { input: effectiveInput(deps.config, body.session) },
          include: body.session?.include ?? null,
        },
      }),
      200,
    );
  });

  app.use(TRANSCRIPTION_SESSIONS_PATH, requireApiKey(deps), limitRequests(deps));
  app.openAPIRegistry.registerPath(
    createRoute({
      method: "post",
      path: TRANSCRIPTION_SESSIONS_PATH,
      tags: ["realtime"],
      summary: "Create a transcription session and its client secret (OpenAI beta shape)",
      description: `OpenAI's beta endpoint: the session object with \`client_secret: {value: "ek_…", expires_at}\`. ${secretDoc} The lifetime is \`client_secret.expires_at.seconds\`.`,
      security: [{ bearerAuth: [] }],
      request: { body: { required: false, content: { "application/json": { schema: betaTranscriptionSessionRequest } } } },
      responses: responses(betaTranscriptionSessionResponse, "the session with its client secret"),
    }),
  );
  app.post(TRANSCRIPTION_SESSIONS_PATH, async (c) => {
    const body = parseBody(betaTranscriptionSessionRequest, readOptionalJson(await c.req.text()));
    const preset = presetFromBeta(body);
    const { value, expiresAt } = issue(c.get("principal"), body.client_secret?.expires_at?.seconds, preset);
    const input = effectiveInput(deps.config, preset);
    c.header("Cache-Control", "no-store");
    return c.json(
      betaTranscriptionSessionResponse.parse({
        id: newSessionId(),
        object: "realtime.transcription_session",
        expires_at: expiresAt,
        input_audio_format: BETA_FORMAT_NAMES[input.format.type ?? "audio/pcm"],
        input_audio_transcription: input.transcription,
        input_audio_noise_reduction: input.noise_reduction,
        turn_detection: input.turn_detection,
        include: preset.include ?? null,
        modalities: body.modalities ?? ["text"],
        client_secret: { value, expires_at: expiresAt },
      }),
      200,
    );
  });
}
