import { randomUUID } from "node:crypto";
import type { MiddlewareHandler } from "hono";
import type { Context } from "hono";
import { refuseKeysInUrl, verifyAdminToken, type Principal } from "../../domain/keys/auth";
import { clientAddress } from "../../shared/auth-throttle";
import { consumeRate, rateHeaders } from "../../shared/rate-limit";
import type { GatewayDeps } from "./deps";

/**
 * `Bindings`: what the server hands the app with the request: the uWS bridge its
 * `remoteAddress`, @hono/node-server its `incoming` Node request.
 */
export type GatewayEnv = {
  Bindings: { remoteAddress?: string; incoming?: { socket?: { remoteAddress?: string } } };
  Variables: { principal: Principal; requestId: string };
};

/** The client's address for throttling (X-Forwarded-For only through TRUSTED_PROXY_HOPS proxies). */
function requestSource(c: Context<GatewayEnv>, trustedProxyHops: number): string {
  const peer = c.env?.remoteAddress ?? c.env?.incoming?.socket?.remoteAddress ?? "";
  return clientAddress(peer, c.req.header("x-forwarded-for"), trustedProxyHops);
}

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

/**
 * Authenticates `Authorization: Bearer sk-…` and sets `principal`. Failures count
 * against the client's address (429 too_many_auth_failures past
 * AUTH_FAILURES_PER_MINUTE, shared/auth-throttle.ts).
 */
export function requireApiKey(deps: GatewayDeps): MiddlewareHandler<GatewayEnv> {
  return async function requireApiKeyMiddleware(c, next) {
    const now = deps.now();
    refuseKeysInUrl(new URL(c.req.url));
    const authorization = c.req.header("authorization");
    const principal = await deps.keyCache.authenticate(authorization, now, requestSource(c, deps.config.auth.trustedProxyHops));
    c.set("principal", principal);
    deps.keys.recordUse(principal, now);
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
