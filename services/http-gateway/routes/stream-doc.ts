import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { openAiError } from "../../../schemas/http";
import { OPENAI_REALTIME_PATH } from "../../../schemas/openai-realtime";
import { AppError } from "../../../shared/errors";
import type { GatewayEnv } from "../auth-middleware";
import { STREAM_PATH } from "./session-token";

/**
 * The realtime WebSockets (the native one and the OpenAI Realtime door) are served by the
 * uWebSockets.js gateway; this documents them in /openapi.json and answers plain HTTP
 * requests (no Upgrade) with 426.
 */
export function registerStreamDoc(app: OpenAPIHono<GatewayEnv>): void {
  const upgradeRequired = () => {
    throw new AppError("validation", "websocket_required", "This endpoint requires a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket).", {
      status: 426,
      headers: { Upgrade: "websocket", Connection: "Upgrade" },
    });
  };
  app.openapi(
    createRoute({
      method: "get",
      path: OPENAI_REALTIME_PATH,
      tags: ["realtime"],
      summary: "OpenAI Realtime transcription door (WebSocket upgrade)",
      description:
        "OpenAI's Realtime API for transcription sessions, so unmodified OpenAI clients work with only the base URL and key changed (the `openai` SDK's `OpenAIRealtimeWS` and its beta class). The same sessions as the native stream (keys, plans, quotas, usage, VAD, streaming recognition). Authenticate with `Authorization: Bearer sk-…` or `Bearer ek_…` (a client secret, whose session config the session starts with), or from a browser the subprotocols `realtime, openai-insecure-api-key.ek_…`; the subprotocol answered is exactly `realtime` when offered. Client events: `session.update` (GA, `session.type: \"transcription\"`), `transcription_session.update` (beta, also chosen by `OpenAI-Beta: realtime=v1` or the `openai-beta.realtime-v1` subprotocol), `input_audio_buffer.append` (base64 in text frames ≤ 16 MiB; `audio/pcm` 24 kHz, `audio/pcmu`, `audio/pcma`), `.commit`, `.clear`. Server events in OpenAI's shapes, first `session.created`. Field-by-field: docs/realtime.md, \"The OpenAI Realtime door\".",
      security: [{ bearerAuth: [] }],
      request: {
        query: z.object({
          intent: z.string().optional().describe("`transcription` (or absent); any other value is answered with an `error` event and close 4000"),
          model: z.string().optional().describe("any model name: the session's default transcription model (a preference for the engine router)"),
        }),
      },
      responses: {
        101: { description: "switching protocols; the server sends session.created (beta: transcription_session.created)" },
        401: { description: "authentication failed, refused before the upgrade (missing_api_key, invalid_api_key: also an expired or forged ek_ secret; revoked_api_key, expired_api_key)", content: { "application/json": { schema: openAiError } } },
        426: { description: "`websocket_required`: not a WebSocket upgrade", content: { "application/json": { schema: openAiError } } },
        429: { description: "connection quota refused (concurrent connections or connections per minute)", content: { "application/json": { schema: openAiError } } },
        503: { description: "`gateway_disabled`, or `upstream_unavailable` with Retry-After", content: { "application/json": { schema: openAiError } } },
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
        "Open with `Authorization: Bearer sk-…` (servers) or `?access_token=rt_…` / `?token=rt_…` (browsers). Send PCM16LE binary frames (mono, or `channels` interleaved) (≤ 1 MiB each) and JSON text messages; receive JSON events, first `session.created`. See docs/realtime.md for events and close codes.",
      security: [{ bearerAuth: [] }],
      request: {
        query: z.object({
          access_token: z.string().optional().describe("rt_ session token (single use: opens one connection)"),
          token: z.string().optional().describe("alias of access_token"),
          sample_rate: z.enum(["8000", "16000", "24000", "48000"]).optional().describe("PCM sample rate of the frames you send; default 16000"),
          channels: z.enum(["1", "2"]).optional().describe("channels interleaved in each frame; default 1. 2 without multichannel: mixed down to mono"),
          multichannel: z
            .enum(["true", "false"])
            .optional()
            .describe("true: each channel has its own VAD, items and transcripts; item events carry `channel`; audio is billed per channel (docs/realtime.md \"Multichannel\")"),
        }),
      },
      responses: {
        101: { description: "switching protocols; the server sends session.created" },
        401: { description: "authentication failed (missing_api_key, invalid_api_key, revoked_api_key, expired_api_key, invalid_session_token, also for a session token already used)", content: { "application/json": { schema: openAiError } } },
        426: { description: "`websocket_required`: not a WebSocket upgrade", content: { "application/json": { schema: openAiError } } },
        429: { description: "connection quota refused (concurrent connections or connections per minute)", content: { "application/json": { schema: openAiError } } },
        503: { description: "`gateway_disabled`, or `upstream_unavailable` with Retry-After", content: { "application/json": { schema: openAiError } } },
      },
    }),
    () => {
      throw new AppError("validation", "websocket_required", "This endpoint requires a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket).", {
        status: 426,
        headers: { Upgrade: "websocket", Connection: "Upgrade" },
      });
    },
  );
}
