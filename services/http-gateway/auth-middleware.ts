import { randomUUID } from "node:crypto";
import type { MiddlewareHandler } from "hono";
import { authenticateApiKey, refuseKeysInUrl, verifyAdminToken, type Principal } from "../../shared/auth";
import { noteKeyUse } from "../../shared/key-use";
import { consumeRate, rateHeaders } from "../../shared/rate-limit";
import type { GatewayDeps } from "./deps";

export type GatewayEnv = { Variables: { principal: Principal; requestId: string } };

/**
 * Gives every request an id (`X-Request-Id`), quoted in 5xx answers and in the log
 * line that records them, so an operator can find what a client reports without the
 * answer itself carrying internal detail. A route may replace it with its own (the
 * segment plane's `seg_…` audit id).
 */
export function assignRequestId(): MiddlewareHandler<GatewayEnv> {
  return async function assignRequestIdMiddleware(c, next) {
    const id = `req_${randomUUID().replace(/-/g, "")}`;
    c.set("requestId", id);
    c.header("X-Request-Id", id);
    await next();
  };
}

/** Authenticates `Authorization: Bearer sk-…` and sets `principal`. */
export function requireApiKey(deps: GatewayDeps): MiddlewareHandler<GatewayEnv> {
  return async function requireApiKeyMiddleware(c, next) {
    const now = deps.now();
    refuseKeysInUrl(new URL(c.req.url));
    const authorization = c.req.header("authorization");
    const principal = deps.keys ? await deps.keys.authenticate(authorization, now) : await authenticateApiKey(deps.db, authorization, now, deps.config.plans);
    c.set("principal", principal);
    noteKeyUse(deps.nats, principal, now, deps.logger);
    await next();
  };
}

/** Counts the request against the plan's maxRequestsPerMinute (after requireApiKey). */
export function limitRequests(deps: GatewayDeps): MiddlewareHandler<GatewayEnv> {
  return async function limitRequestsMiddleware(c, next) {
    const principal = c.get("principal");
    const limit = principal.limits.maxRequestsPerMinute;
    const state = deps.limiter
      ? await deps.limiter.consume(principal.keyId, limit, deps.now())
      : await consumeRate(deps.nats, principal.keyId, "requests", limit, deps.now());
    for (const [name, value] of Object.entries(rateHeaders(state))) c.header(name, value);
    await next();
  };
}

/** Operator routes: `Authorization: Bearer <GATEWAY_ADMIN_TOKEN>`. */
export function requireAdmin(deps: GatewayDeps): MiddlewareHandler {
  return async function requireAdminMiddleware(c, next) {
    verifyAdminToken(deps.config.auth.adminToken, c.req.header("authorization"));
    await next();
  };
}
