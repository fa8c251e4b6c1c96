import type { MiddlewareHandler } from "hono";
import { AppError } from "../../shared/errors";
import type { GatewayEnv } from "./auth-middleware";
import type { GatewayDeps } from "./deps";

/**
 * Answers 503 `nats_unavailable` with Retry-After at once while the NATS connection is
 * down or its streams and buckets are not yet declared again after a reconnect
 * (shared/nats.ts health). Every step of such a request (rate limit, audio budget,
 * usage, audit) needs NATS, and each would otherwise wait out its own request timeout
 * against a server that is not back yet: a segment request hung 20 s after a restart.
 */
export function requireNats(deps: Pick<GatewayDeps, "nats">, retryAfterSeconds = 2): MiddlewareHandler<GatewayEnv> {
  return async function natsReady(_c, next) {
    const health = deps.nats.health();
    if (!health.ok) {
      throw new AppError("unavailable", "nats_unavailable", `NATS is not ready: ${health.reason ?? "unhealthy"}; try again shortly`, {
        headers: { "Retry-After": String(retryAfterSeconds) },
      });
    }
    await next();
  };
}
