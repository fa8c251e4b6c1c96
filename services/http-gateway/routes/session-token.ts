import { createRoute, type OpenAPIHono } from "@hono/zod-openapi";
import { openAiError, sessionToken } from "../../../schemas/http";
import { issueSessionToken } from "../../../domain/keys/auth";
import { limitRequests, requireApiKey, type GatewayEnv } from "../auth-middleware";
import type { GatewayDeps } from "../deps";

export const STREAM_PATH = "/v1/audio/transcriptions/stream";

/** POST /v1/audio/transcriptions/session-token (spec 4.5): a 60 s, single-use `rt_` token for browsers. */
export function registerSessionTokenRoutes(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  const path = "/v1/audio/transcriptions/session-token";
  // counted like the other request routes: one token per call against maxRequestsPerMinute
  app.use(path, requireApiKey(deps), limitRequests(deps));
  app.openapi(
    createRoute({
      method: "post",
      path,
      tags: ["realtime"],
      summary: "Issue a short-lived browser session token",
      description:
        "The customer backend calls this with its sk- key and hands the token to a browser, which opens the realtime WebSocket with `?access_token=<token>` (alias `?token=`). The token is valid 60 seconds, signed with HMAC-SHA256, bound to the issuing key (revoking the key invalidates its tokens) and single use: it opens one WebSocket connection, and any later upgrade with it is 401 `invalid_session_token`; fetch a new token for every connection. Any request body is ignored.",
      security: [{ bearerAuth: [] }],
      responses: {
        200: { description: "the token", content: { "application/json": { schema: sessionToken } } },
        401: { description: "authentication failed", content: { "application/json": { schema: openAiError } } },
        429: { description: "`rate_limit_exceeded`: the key's maxRequestsPerMinute is used up (`Retry-After`)", content: { "application/json": { schema: openAiError } } },
        503: { description: "`token_issuer_unavailable`: GATEWAY_SESSION_TOKEN_SECRET is not set", content: { "application/json": { schema: openAiError } } },
      },
    }),
    (c) => {
      const { token, expiresIn } = issueSessionToken(deps.config.auth.sessionTokenSecret, c.get("principal"), deps.now());
      c.header("Cache-Control", "no-store");
      return c.json({ token, expires_in: expiresIn, endpoint: STREAM_PATH }, 200);
    },
  );
}
