import type { MiddlewareHandler } from "hono";
import { SpanKind, SpanStatusCode, withSpan } from "../../shared/telemetry";
import type { GatewayEnv } from "./auth-middleware";

/**
 * One server span per HTTP request (a root: a client's `traceparent` is not trusted to
 * parent our traces), named `<METHOD> <route pattern>` once the route is known, with the
 * request id and status. Everything the request publishes or asks of a worker carries
 * it on (shared/telemetry.ts).
 */
export function traceRequests(): MiddlewareHandler<GatewayEnv> {
  return async function traceRequestsMiddleware(c, next) {
    await withSpan(`${c.req.method} ${c.req.path}`, { kind: SpanKind.SERVER, root: true, attributes: { "http.request.method": c.req.method } }, async (span) => {
      await next();
      // the last matched route that is not a middleware (`*` or a path-wide `use`)
      const route = c.req.matchedRoutes.filter((r) => r.method !== "ALL").at(-1)?.path;
      if (route) span.updateName(`${c.req.method} ${route}`);
      span.setAttributes({ "http.route": route ?? c.req.path, "http.response.status_code": c.res.status, "request.id": c.get("requestId") ?? "" });
      if (c.res.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    });
  };
}
