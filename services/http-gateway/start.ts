import { createAdaptorServer, type ServerType } from "@hono/node-server";
import { bindWithin } from "../../shared/listen";
import type { RunningService, ServiceContext } from "../context";
import { startConfiguredKeyCache, type KeyCache } from "../../domain/keys/key-cache";
import type { SegmentBudgets } from "../../domain/usage/budget";
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
  const keyCache = await startConfiguredKeyCache({ nats: ctx.nats, db: ctx.db, config: ctx.config, logger });
  // the realtime gateway in this process follows revocations through the same feed
  ctx.slots.keyCache = keyCache;
  const limiter = createRequestLimiter(ctx.nats);
  const budgets = ctx.usage.segmentBudgets();
  const app = createApp({
    config: ctx.config,
    nats: ctx.nats,
    db: ctx.db,
    logger,
    keyCache,
    keys: ctx.keys,
    usage: ctx.usage,
    limiter,
    budgets,
    now: ctx.now,
    router: ctx.router,
    objects: ctx.objects,
    jobs: ctx.jobs,
    readiness: () => checkReadiness(ctx),
  });
  ctx.slots.httpFetch = app.fetch;
  if (ctx.running.has("realtime-gateway")) return { name: "http-gateway", stop: () => stopAll(limiter, budgets, keyCache) };

  // Node's listener is exclusive (no SO_REUSEPORT in Node 20): a taken port is retried
  // for SHUTDOWN_TIMEOUT_MS, then fails the start (shared/listen.ts).
  const { host, port } = ctx.config.http;
  const server: ServerType = createAdaptorServer({ fetch: app.fetch });
  await bindWithin(
    () =>
      new Promise<boolean>((resolve, reject) => {
        const onError = (err: NodeJS.ErrnoException) => (err.code === "EADDRINUSE" ? resolve(false) : reject(err));
        server.once("error", onError);
        server.listen(port, host, () => {
          server.off("error", onError);
          resolve(true);
        });
      }),
    { host, port, waitMs: ctx.config.shutdown.timeoutMs, logger },
  );
  const address = server.address();
  ctx.slots.port = address && typeof address === "object" ? address.port : port;
  return {
    name: "http-gateway",
    stop: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await stopAll(limiter, budgets, keyCache);
    },
  };
}

/** Hands back what this gateway holds of the shared counters, then stops following the key stream. */
async function stopAll(limiter: RequestLimiter, budgets: SegmentBudgets, keyCache: KeyCache): Promise<void> {
  await Promise.all([limiter.stop(), budgets.stop()]);
  await keyCache.stop();
}
