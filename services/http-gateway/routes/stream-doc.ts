import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { openAiError } from "../../../schemas/http";
import { AppError } from "../../../shared/errors";
import type { GatewayEnv } from "../auth-middleware";
import { STREAM_PATH } from "./session-token";

/**
 * The realtime WebSocket is served by the uWebSockets.js gateway; this documents it in
 * /openapi.json and answers plain HTTP requests (no Upgrade) with 426.
 */
export function registerStreamDoc(app: OpenAPIHono<GatewayEnv>): void {
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
