import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { openAiError } from "../../../schemas/http";
import { OPENAI_REALTIME_PATH } from "../../../schemas/openai-realtime";
import { AppError } from "../../../shared/errors";
import type { GatewayEnv } from "../auth-middleware";
import { STREAM_PATH } from "./session-token";
import { KEYTERMS_DESCRIPTION } from "../../../schemas/keyterms";

/**
 * The realtime WebSockets (the native one and the OpenAI Realtime door) are served by the
 * uWebSockets.js gateway; this documents them in /openapi.json and answers plain HTTP
 * requests (no Upgrade) with 426.
 */
const upgradeRequired = () => {
  throw new AppError("validation", "websocket_required", "This endpoint requires a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket).", {
    status: 426,
    headers: { Upgrade: "websocket", Connection: "Upgrade" },
  });
};

const refused = (description: string) => ({ description, content: { "application/json": { schema: openAiError } } });

/** Both doors resume a session the same way (docs/realtime-resume.md). */
const resumeQuery = {
  resume: z.string().optional().describe("the rs_ resume credential of the last session.created or session.resumed: resumes that session instead of opening one"),
  last_event_id: z
    .string()
    .optional()
    .describe("with resume: the id of the last event the client processed (a multichannel session: one per channel, comma-separated); the session's events after it are replayed, then live ones"),
};

/** The native stream's query parameters (admit.ts `parseAudioParams`, `credentialsOf`); also the AsyncAPI document's. */
export const nativeStreamQuery = z.object({
  access_token: z.string().optional().describe("rt_ session token (single use: opens one connection)"),
  token: z.string().optional().describe("alias of access_token"),
  sample_rate: z.enum(["8000", "16000", "24000", "48000"]).optional().describe("PCM sample rate of the frames you send; default 16000"),
  channels: z.enum(["1", "2"]).optional().describe("channels interleaved in each frame; default 1. 2 without multichannel: mixed down to mono"),
  multichannel: z
    .enum(["true", "false"])
    .optional()
    .describe("true: each channel has its own VAD, items and transcripts; item events carry `channel`; audio is billed per channel (docs/realtime.md \"Multichannel\")"),
  language: z.string().optional().describe("ISO-639-1 hint for the engines, e.g. `en` (400 `invalid_language` otherwise)"),
  keyterms: z
    .string()
    .optional()
    .describe(`${KEYTERMS_DESCRIPTION}. Comma-separated or repeated; the session's initial keyterms (session.update changes them). A bad value is 400 invalid_request with param \`keyterms\``),
  ...resumeQuery,
});

/** The OpenAI door's query parameters (openai-door.ts); also the AsyncAPI document's. */
export const openAiDoorQuery = z.object({
  intent: z.string().optional().describe("`transcription` (or absent); any other value is answered with an `error` event and close 4000"),
  model: z.string().optional().describe("any model name: the session's default transcription model (a preference for the engine router)"),
  ...resumeQuery,
});

/** The refusals both doors answer before the upgrade, besides authentication's. */
const doorRefusals = {
  400: refused("`resume_event_unknown`: last_event_id is not an event of this session"),
  403: refused("`resume_forbidden`: the resume credential is of another owner's session"),
  409: refused("`session_resumed_elsewhere` (the credential was used already) or `resume_wrong_door` (the session was opened on the other door)"),
  410: refused("`resume_expired` (the grace passed, the session closed) or `resume_state_lost` (the OpenAI door's stored state is unreadable)"),
  426: refused("`websocket_required`: not a WebSocket upgrade"),
  429: refused("connection quota refused (concurrent connections or connections per minute)"),
  503: refused("`gateway_disabled`, or `upstream_unavailable` with Retry-After"),
};

export function registerStreamDoc(app: OpenAPIHono<GatewayEnv>): void {
  app.openapi(
    createRoute({
      method: "get",
      path: OPENAI_REALTIME_PATH,
      tags: ["realtime"],
      summary: "OpenAI Realtime transcription door (WebSocket upgrade)",
      description:
        "OpenAI's Realtime API for transcription sessions, so unmodified OpenAI clients work with only the base URL and key changed (the `openai` SDK's `OpenAIRealtimeWS` and its beta class). The same sessions as the native stream (keys, plans, quotas, usage, VAD, streaming recognition). Authenticate with `Authorization: Bearer sk-…` or `Bearer ek_…` (a client secret, whose session config the session starts with), or from a browser the subprotocols `realtime, openai-insecure-api-key.ek_…`; the subprotocol answered is exactly `realtime` when offered. Client events: `session.update` (GA, `session.type: \"transcription\"`), `transcription_session.update` (beta, also chosen by `OpenAI-Beta: realtime=v1` or the `openai-beta.realtime-v1` subprotocol), `input_audio_buffer.append` (base64 in text frames ≤ 16 MiB; `audio/pcm` 24 kHz, `audio/pcmu`, `audio/pcma`), `.commit`, `.clear`. Server events in OpenAI's shapes, first `session.created`. Every message and close code: /asyncapi.json (AsyncAPI 3); field by field: docs/realtime.md, \"The OpenAI Realtime door\".",
      security: [{ bearerAuth: [] }],
      request: {
        query: openAiDoorQuery,
      },
      responses: {
        101: { description: "switching protocols; the server sends session.created (beta: transcription_session.created)" },
        401: refused("authentication failed, refused before the upgrade (missing_api_key, invalid_api_key: also an expired or forged ek_ secret; revoked_api_key, expired_api_key; invalid_resume_credential)"),
        ...doorRefusals,
      },
    }),
    upgradeRequired,
  );
  app.openapi(
    createRoute({
      method: "get",
      path: STREAM_PATH,
      tags: ["realtime"],
      summary: "Realtime transcription WebSocket (upgrade)",
      description:
        "Open with `Authorization: Bearer sk-…` (servers) or `?access_token=rt_…` / `?token=rt_…` (browsers). Send PCM16LE binary frames (mono, or `channels` interleaved) (≤ 1 MiB each) and JSON text messages; receive JSON events, first `session.created`. Every message and close code: /asyncapi.json (AsyncAPI 3); the guide: docs/realtime.md.",
      security: [{ bearerAuth: [] }],
      request: {
        query: nativeStreamQuery,
      },
      responses: {
        101: { description: "switching protocols; the server sends session.created" },
        401: refused("authentication failed (missing_api_key, invalid_api_key, revoked_api_key, expired_api_key, invalid_session_token, also for a session token already used; invalid_resume_credential)"),
        ...doorRefusals,
      },
    }),
    upgradeRequired,
  );
}
