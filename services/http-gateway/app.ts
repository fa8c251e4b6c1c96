import { OpenAPIHono } from "@hono/zod-openapi";
import { issueErrorCode } from "../../schemas/safe-string";
import { validationError } from "../../shared/errors";
import { assignRequestId, type GatewayEnv } from "./auth-middleware";
import { limitBody, MAX_JSON_BODY_BYTES } from "./body-limit";
import type { GatewayDeps } from "./deps";
import { notFound, onError } from "./errors";
import { registerAdminRoutes } from "./routes/admin";
import { registerClientSecretRoutes } from "./routes/client-secrets";
import { registerJobPollAliases, registerJobsRoutes } from "./routes/jobs";
import { registerDocsRoutes, registerMetaRoutes } from "./routes/meta";
import { registerSegmentRoutes, SEGMENT_PATH } from "./routes/segment";
import { registerSessionTokenRoutes } from "./routes/session-token";
import { registerStreamDoc } from "./routes/stream-doc";
import { registerUsageRoutes } from "./routes/usage";
import { traceRequests } from "./trace-middleware";

/**
 * The hono app serving every plain HTTP route under the one base URL. Route modules
 * register themselves; order matters only for the legacy `GET /{workflowId}` alias,
 * which is registered last so it never shadows a named route.
 */
export function createApp(deps: GatewayDeps): OpenAPIHono<GatewayEnv> {
  const app = new OpenAPIHono<GatewayEnv>({
    defaultHook: (result) => {
      if (!result.success) {
        const issue = result.error.issues[0];
        const param = issue?.path.join(".") || undefined;
        throw validationError(issueErrorCode(issue, "invalid_request"), `${param ?? "request"}: ${issue?.message ?? "invalid"}`, { param });
      }
    },
  });
  app.onError(onError(deps.logger));
  app.notFound(notFound);
  app.use("*", assignRequestId());
  app.use("*", traceRequests());
  // Every body is bounded while it streams in; the segment upload streams its own
  // (larger) multipart limit in the route.
  app.use(
    "*",
    limitBody({
      limitFor: (request) => {
        const multipart = /^multipart\/form-data\b/i.test(request.headers.get("content-type") ?? "");
        return multipart && new URL(request.url).pathname === SEGMENT_PATH ? undefined : MAX_JSON_BODY_BYTES;
      },
    }),
  );

  registerMetaRoutes(app, deps);
  registerDocsRoutes(app, deps);
  registerAdminRoutes(app, deps);
  registerSessionTokenRoutes(app, deps);
  registerClientSecretRoutes(app, deps);
  registerUsageRoutes(app, deps);
  registerStreamDoc(app);
  registerSegmentRoutes(app, deps);
  registerJobsRoutes(app, deps);
  // last: UUID-shaped poll aliases (GET /v1/audio/transcriptions/{id}, GET /{id}) and POST /
  registerJobPollAliases(app, deps);
  return app;
}
