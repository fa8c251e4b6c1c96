import type { MiddlewareHandler } from "hono";
import { SpanKind, SpanStatusCode, withSpan } from "../../shared/telemetry";
import { httpDuration, httpRequests } from "../../shared/metrics";
import type { GatewayEnv } from "./auth-middleware";

/**
 * One server span per HTTP request (a root: a client's `traceparent` is not trusted to
 * parent our traces), named `<METHOD> <route pattern>` once the route is known, with the
 * request id and status. Everything the request publishes or asks of a worker carries
 * it on (shared/telemetry.ts). The same route pattern and status label the request
 * counter and duration histogram (shared/metrics.ts; an unmatched path counts as
 * `unmatched`, so cardinality stays bounded).
 */
export function traceRequests(): MiddlewareHandler<GatewayEnv> {
  return async function traceRequestsMiddleware(c, next) {
    const started = performance.now();
    await withSpan(`${c.req.method} ${c.req.path}`, { kind: SpanKind.SERVER, root: true, attributes: { "http.request.method": c.req.method } }, async (span) => {
      await next();
      // the last matched route that is not a middleware (`*` or a path-wide `use`)
      const route = c.req.matchedRoutes.filter((r) => r.method !== "ALL").at(-1)?.path;
      if (route) span.updateName(`${c.req.method} ${route}`);
      span.setAttributes({ "http.route": route ?? c.req.path, "http.response.status_code": c.res.status, "request.id": c.get("requestId") ?? "" });
      if (c.res.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      const labels = { method: c.req.method, route: route ?? "unmatched", status: String(c.res.status) };
      httpRequests.inc(labels);
      httpDuration.observe(labels, (performance.now() - started) / 1000);
    });
  };
}
