import { createRoute, type OpenAPIHono } from "@hono/zod-openapi";
import { resolveLimits } from "../../../domain/usage/limits";
import { keyWindowUsage, ownerWindowUsage } from "../../../domain/usage/queries";
import { billingWindow, round3, secondsLeft } from "../../../domain/usage/quota";
import { adminError, ok, openAiError, ownerUsage, ownerUsageQuery, usageView, type UsageView } from "../../../schemas/http";
import { peekRate } from "../../../shared/rate-limit";
import { requireAdmin, requireApiKey, type GatewayEnv } from "../auth-middleware";
import type { GatewayDeps } from "../deps";

const USAGE_PATH = "/v1/usage";
const OWNER_USAGE_PATH = "/v1/external-transcription/usage";

/**
 * What a tenant has used (issue: "a tenant cannot see its own usage"):
 * - GET /v1/usage, for the calling key: plan, limits, the current billing window, audio
 *   seconds used and left (every plane), billed requests in the window and counted
 *   requests in the current minute. Not itself counted against the rate limit.
 * - GET /v1/external-transcription/usage?owner_id=…, for the operator: the owner's keys
 *   in the current window.
 * Both read the usage_windows read model, which follows the log by milliseconds.
 */
export function registerUsageRoutes(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  app.use(USAGE_PATH, requireApiKey(deps));
  app.openapi(
    createRoute({
      method: "get",
      path: USAGE_PATH,
      tags: ["usage"],
      summary: "Usage of the calling key in the current billing window",
      security: [{ bearerAuth: [] }],
      responses: {
        200: { description: "plan, limits, window, audio seconds and requests", content: { "application/json": { schema: usageView } } },
        401: { description: "authentication failed", content: { "application/json": { schema: openAiError } } },
      },
    }),
    async (c) => {
      const principal = c.get("principal");
      const now = deps.now();
      const window = billingWindow(now, deps.config.usage.windowSeconds);
      const [used, minute] = await Promise.all([
        keyWindowUsage(deps.db, principal.keyId, window.start),
        // the bucket counts the units this process holds unspent too (shared/rate-limit.ts)
        peekRate(deps.nats, principal.keyId, "requests", now).then((n) => Math.max(0, n - (deps.limiter?.unspent(principal.keyId, now) ?? 0))),
      ]);
      const limit = principal.limits.maxAudioSecondsPerWindow;
      const body: UsageView = {
        object: "usage",
        key_id: principal.keyId,
        owner_id: principal.ownerId,
        plan: principal.plan,
        limits: principal.limits,
        window: { start: window.start.toISOString(), end: window.end.toISOString(), seconds: window.seconds },
        audio_seconds: { used: round3(used.audioSeconds), remaining: secondsLeft(limit, used.audioSeconds), limit },
        requests: { window: used.requests, current_minute: minute, per_minute_limit: principal.limits.maxRequestsPerMinute },
      };
      c.header("Cache-Control", "no-store");
      return c.json(body, 200);
    },
  );

  app.use(OWNER_USAGE_PATH, requireAdmin(deps));
  app.openapi(
    createRoute({
      method: "get",
      path: OWNER_USAGE_PATH,
      tags: ["usage"],
      summary: "Usage of one owner's keys in the current billing window (operator)",
      security: [{ adminToken: [] }],
      request: { query: ownerUsageQuery },
      responses: {
        200: { description: "per key and in total", content: { "application/json": { schema: ok(ownerUsage) } } },
        400: { description: "`owner_id` missing or invalid", content: { "application/json": { schema: adminError } } },
        401: { description: "admin token missing or wrong", content: { "application/json": { schema: adminError } } },
      },
    }),
    async (c) => {
      const { owner_id } = c.req.valid("query");
      const window = billingWindow(deps.now(), deps.config.usage.windowSeconds);
      const rows = await ownerWindowUsage(deps.db, owner_id, window.start);
      const keys = rows.map((r) => ({
        key_id: r.keyId,
        plan: r.plan,
        audio_seconds: round3(r.audioSeconds),
        requests: r.requests,
        audio_limit: resolveLimits(deps.config.plans, r.plan, r.limitOverrides).maxAudioSecondsPerWindow,
      }));
      return c.json(
        {
          ok: true as const,
          data: {
            owner_id,
            window: { start: window.start.toISOString(), end: window.end.toISOString(), seconds: window.seconds },
            keys,
            audio_seconds: round3(keys.reduce((n, k) => n + k.audio_seconds, 0)),
            requests: keys.reduce((n, k) => n + k.requests, 0),
          },
        },
        200,
      );
    },
  );
}
