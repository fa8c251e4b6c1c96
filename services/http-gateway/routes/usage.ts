import { createRoute, type OpenAPIHono } from "@hono/zod-openapi";
import { adminError, ok, openAiError, ownerUsage, ownerUsageQuery, usageView, type UsageView } from "../../../schemas/http";
import { withStore } from "../../../shared/db/index";
import { resolveLimits } from "../../../shared/plans";
import { peekRate } from "../../../shared/rate-limit";
import { windowStart } from "../../../shared/usage";
import { requireAdmin, requireApiKey, type GatewayEnv } from "../auth-middleware";
import type { GatewayDeps } from "../deps";

export const USAGE_PATH = "/v1/usage";
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
      const seconds = deps.config.usage.windowSeconds;
      const start = windowStart(now, seconds);
      const [row, minute] = await Promise.all([
        withStore("store_unavailable", () =>
          deps.db.selectFrom("usage_windows").select(["audio_seconds", "requests"]).where("key_id", "=", principal.keyId).where("window_start", "=", start).executeTakeFirst(),
        ),
        // the bucket counts the units this process holds unspent too (shared/rate-limit.ts)
        peekRate(deps.nats, principal.keyId, "requests", now).then((n) => Math.max(0, n - (deps.limiter?.unspent(principal.keyId, now) ?? 0))),
      ]);
      const used = row ? Number(row.audio_seconds) : 0;
      const limit = principal.limits.maxAudioSecondsPerWindow;
      const body: UsageView = {
        object: "usage",
        key_id: principal.keyId,
        owner_id: principal.ownerId,
        plan: principal.plan,
        limits: principal.limits,
        window: { start: start.toISOString(), end: new Date(start.getTime() + seconds * 1000).toISOString(), seconds },
        audio_seconds: { used: Math.round(used * 1000) / 1000, remaining: Math.max(0, Math.round((limit - used) * 1000) / 1000), limit },
        requests: { window: row ? Number(row.requests) : 0, current_minute: minute, per_minute_limit: principal.limits.maxRequestsPerMinute },
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
      const now = deps.now();
      const seconds = deps.config.usage.windowSeconds;
      const start = windowStart(now, seconds);
      const rows = await withStore("store_unavailable", () =>
        deps.db
          .selectFrom("api_keys")
          .leftJoin("usage_windows", (j) => j.onRef("usage_windows.key_id", "=", "api_keys.id").on("usage_windows.window_start", "=", start))
          .select(["api_keys.id as key_id", "api_keys.plan", "api_keys.limit_overrides", "usage_windows.audio_seconds", "usage_windows.requests"])
          .where("api_keys.owner_id", "=", owner_id)
          .orderBy("api_keys.created_at")
          .execute(),
      );
      const keys = rows.map((r) => ({
        key_id: r.key_id as string,
        plan: r.plan as string,
        audio_seconds: Math.round(Number(r.audio_seconds ?? 0) * 1000) / 1000,
        requests: Number(r.requests ?? 0),
        audio_limit: resolveLimits(deps.config.plans, r.plan as string, r.limit_overrides).maxAudioSecondsPerWindow,
      }));
      return c.json(
        {
          ok: true as const,
          data: {
            owner_id,
            window: { start: start.toISOString(), end: new Date(start.getTime() + seconds * 1000).toISOString(), seconds },
            keys,
            audio_seconds: Math.round(keys.reduce((n, k) => n + k.audio_seconds, 0) * 1000) / 1000,
            requests: keys.reduce((n, k) => n + k.requests, 0),
          },
        },
        200,
      );
    },
  );
}
