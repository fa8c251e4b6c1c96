import { createRoute, type OpenAPIHono } from "@hono/zod-openapi";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { health, readiness, type Health } from "../../../schemas/http";
import type { NatsHealth } from "../../../shared/nats";
import type { GatewayEnv } from "../auth-middleware";
import type { GatewayDeps } from "../deps";
import { buildAsyncApiDocument, type AsyncApiServer } from "../asyncapi";
import { renderMetrics } from "../../../shared/metrics";

const started = Date.now();

/**
 * Liveness from the NATS adapter's health. A short outage (a nats-server restart heals
 * itself within seconds) keeps 200 and only names the reason, so an orchestrator does
 * not restart every replica during a blip; past `boundMs` the process is deemed unable
 * to heal and answers 503 `degraded`.
 */
function livenessReport(nats: NatsHealth, boundMs: number, nowMs: number, startedMs: number): Health {
  const uptime_seconds = Math.round((nowMs - startedMs) / 1000);
  if (nats.ok) return { status: "ok", uptime_seconds };
  const forMs = Math.max(0, nowMs - (nats.since ?? nowMs));
  return {
    status: forMs > boundMs ? "degraded" : "ok",
    uptime_seconds,
    reason: `${nats.reason ?? "NATS unhealthy"} (for ${Math.round(forMs / 1000)} s; degraded after ${Math.round(boundMs / 1000)} s)`,
    unhealthy_seconds: Math.round(forMs / 1000),
  };
}

/** Liveness, readiness, the OpenAPI document and the interactive docs page. */
export function registerMetaRoutes(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  app.openapi(
    createRoute({
      method: "get",
      path: "/health",
      tags: ["health"],
      summary: "Liveness: the process is up, or has been able to recover from a NATS outage within the bound",
      responses: {
        200: { description: "alive (a shorter outage is named in `reason`)", content: { "application/json": { schema: health } } },
        503: { description: "degraded: NATS unreachable or not re-declared for longer than NATS_UNHEALTHY_LIVENESS_MS", content: { "application/json": { schema: health } } },
      },
    }),
    (c) => {
      const report = livenessReport(deps.nats.health(), deps.config.nats.unhealthyLivenessMs, Date.now(), started);
      return c.json(report, report.status === "ok" ? 200 : 503);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/readyz",
      tags: ["health"],
      summary: "Readiness: NATS and Postgres reachable, projections caught up, realtime gateway accepting",
      responses: {
        200: { description: "ready", content: { "application/json": { schema: readiness } } },
        503: { description: "not ready; `checks` says why", content: { "application/json": { schema: readiness } } },
      },
    }),
    async (c) => {
      const report = await deps.readiness();
      return c.json(report, report.status === "ready" ? 200 : 503);
    },
  );

  // Prometheus text exposition of this process (docs/operations.md "Metrics"); not in
  // the OpenAPI document: it is for the operator's scraper, not for API clients.
  app.get("/metrics", async (c) => {
    const { contentType, body } = await renderMetrics();
    return c.body(body, 200, { "content-type": contentType });
  });
}

const require = createRequire(import.meta.url);

/**
 * Where the AsyncAPI document says clients connect: PUBLIC_BASE_URL when set (behind a
 * TLS proxy the request itself looks like plain HTTP), else the request's own host.
 */
function realtimeServerOf(publicBaseUrl: string | undefined, requestUrl: string): AsyncApiServer {
  const url = new URL(publicBaseUrl ?? requestUrl);
  return { protocol: url.protocol === "https:" ? "wss" : "ws", host: url.host, pathname: publicBaseUrl ? url.pathname : undefined };
}

/** Serves /openapi.json (generated from the route schemas), /asyncapi.json (the realtime protocol) and /docs (Swagger UI, self-hosted). */
export function registerDocsRoutes(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  app.openAPIRegistry.registerComponent("securitySchemes", "bearerAuth", {
    type: "http",
    scheme: "bearer",
    description: "API key: `Authorization: Bearer sk-…`",
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "adminToken", {
    type: "http",
    scheme: "bearer",
    description: "Operator token: `Authorization: Bearer <GATEWAY_ADMIN_TOKEN>`",
  });
  let cached: unknown;
  app.get("/openapi.json", (c) => {
    cached ??= app.getOpenAPI31Document({
      openapi: "3.1.0",
      info: {
        title: "Speech Transcription Service",
        version: "1.0.0",
        description:
          "Realtime WebSocket transcription with server-side VAD, synchronous segment upload, and asynchronous batch jobs. The realtime WebSocket messages are described in /asyncapi.json (AsyncAPI 3). Errors on transcription routes use `{ error: { message, type, code } }`; admin routes use `{ ok, data | error: { code, message, retryable } }`.",
      },
      servers: [{ url: deps.config.http.publicBaseUrl ?? "/" }],
    });
    return c.json(cached);
  });

  app.get("/asyncapi.json", (c) => c.json(buildAsyncApiDocument(realtimeServerOf(deps.config.http.publicBaseUrl, c.req.url))));

  const dist = join(require.resolve("swagger-ui-dist/package.json"), "..");
  const assets: Record<string, [string, string]> = {
    "swagger-ui.css": ["text/css; charset=utf-8", "swagger-ui.css"],
    "swagger-ui-bundle.js": ["text/javascript; charset=utf-8", "swagger-ui-bundle.js"],
  };
  const loaded = new Map<string, string>();
  app.get("/docs/assets/:name", (c) => {
    const asset = assets[c.req.param("name")];
    if (!asset) return c.notFound();
    let body = loaded.get(asset[1]);
    if (!body) {
      body = readFileSync(join(dist, asset[1]), "utf8");
      loaded.set(asset[1], body);
    }
    c.header("Cache-Control", "public, max-age=86400");
    return c.body(body, 200, { "Content-Type": asset[0] });
  });
  app.get("/docs", (c) =>
    c.html(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Speech Transcription API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><p style="font-family: sans-serif; margin: 1em 2em">The realtime WebSocket protocol (both doors, every message, close codes): <a href="/asyncapi.json">/asyncapi.json</a> (AsyncAPI 3). The HTTP routes: <a href="/openapi.json">/openapi.json</a>, below.</p>
<div id="docs"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#docs", deepLinking: true, persistAuthorization: false });</script>
</body></html>`),
  );
}
