import { serve, type ServerType } from "@hono/node-server";
import type { RunningService, ServiceContext } from "../../shared/service";
import { createSegmentBudgets, type SegmentBudgets } from "../../shared/audio-budget";
import { startConfiguredKeyCache, type KeyCache } from "../../shared/key-cache";
import { createRequestLimiter, type RequestLimiter } from "../../shared/rate-limit";
import { createApp } from "./app";
import { checkReadiness } from "./readiness";

/**
 * Builds the hono app. When the realtime gateway runs in the same process it serves
 * this app's fetch on its uWebSockets.js listener (one port for HTTP and WebSocket);
 * otherwise the app listens on its own with @hono/node-server.
 */
export async function startHttpGateway(ctx: ServiceContext): Promise<RunningService> {
  const logger = ctx.logger.child({ service: "http-gateway" });
  const keys = await startConfiguredKeyCache({ nats: ctx.nats, db: ctx.db, config: ctx.config, logger });
  // the realtime gateway in this process follows revocations through the same feed
  ctx.slots.keys = keys;
  const limiter = createRequestLimiter(ctx.nats);
  const budgets = createSegmentBudgets({ nats: ctx.nats, db: ctx.db, windowSeconds: ctx.config.usage.windowSeconds });
  const app = createApp({
    config: ctx.config,
    nats: ctx.nats,
    db: ctx.db,
    logger,
    keys,
    limiter,
    budgets,
    now: ctx.now,
    router: ctx.router,
    objects: ctx.objects,
    readiness: () => checkReadiness(ctx),
  });
  ctx.slots.httpFetch = app.fetch;
  if (ctx.running.has("realtime-gateway")) return { name: "http-gateway", stop: () => stopAll(limiter, budgets, keys) };

  const server: ServerType = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: ctx.config.http.host, port: ctx.config.http.port }, (info) => {
      ctx.slots.port = info.port;
      resolve(s);
    });
  });
  return {
    name: "http-gateway",
    stop: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await stopAll(limiter, budgets, keys);
    },
  };
}

/** Hands back what this gateway holds of the shared counters, then stops following the key stream. */
async function stopAll(limiter: RequestLimiter, budgets: SegmentBudgets, keys: KeyCache): Promise<void> {
  await Promise.all([limiter.stop(), budgets.stop()]);
  await keys.stop();
}
