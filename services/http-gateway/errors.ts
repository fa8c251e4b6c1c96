import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import { AppError, errorHeaders, toAppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";

/**
 * The one mapping from AppError to HTTP. Admin routes (`/v1/external-transcription/…`)
 * answer `{ ok: false, error: { code, message, retryable } }`; every other route answers
 * OpenAI's `{ error: { message, type, code, param } }`.
 */
const isAdminPath = (path: string) => path.startsWith("/v1/external-transcription");

function openAiType(e: AppError): string {
  if (e.type) return e.type;
  if (e.status === 401) return "authentication_error";
  if (e.status === 403) return "permission_error";
  if (e.status === 429) return "rate_limit_error";
  if (e.status >= 500) return "server_error";
  return "invalid_request_error";
}

function errorResponse(c: Context, e: AppError): Response {
  for (const [name, value] of Object.entries(errorHeaders(e))) c.header(name, value);
  const status = e.status as 400;
  if (isAdminPath(c.req.path)) {
    return c.json({ ok: false as const, error: { code: e.code, message: e.message, retryable: e.retryable } }, status);
  }
  return c.json({ error: { message: e.message, type: openAiType(e), code: e.code, param: e.param ?? null } }, status);
}

export function onError(logger: Logger) {
  return function handleError(err: Error, c: Context): Response {
    if (err instanceof HTTPException) {
      const code = err.status === 413 ? "request_too_large" : err.status === 400 ? "invalid_request" : "http_error";
      const kind = err.status === 413 ? "too_large" : err.status >= 500 ? "internal" : "validation";
      return errorResponse(c, new AppError(kind, code, err.message || "Bad request", { status: err.status }));
    }
    const e = toAppError(err);
    if (e.kind !== "internal") return errorResponse(c, e);
    // Internal failures (a Postgres message, a NATS timeout) stay in the log: the
    // client gets a generic answer with the request id that finds the log line.
    const requestId = (c.get("requestId") as string | undefined) ?? "unknown";
    logger.error("unhandled error", { request_id: requestId, method: c.req.method, path: c.req.path, error: err.message, stack: err.stack });
    return errorResponse(c, new AppError("internal", "internal_error", `Internal server error. Quote request id ${requestId} when reporting it.`));
  };
}

export function notFound(c: Context): Response {
  return errorResponse(c, new AppError("not_found", "not_found", `No route for ${c.req.method} ${c.req.path}`));
}
