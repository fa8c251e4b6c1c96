import type { HttpResponse } from "@trufflesuite/uws-js-unofficial";
import { AppError, errorHeaders } from "../../shared/errors";

/** Refused upgrades and plain HTTP on a WebSocket path, in OpenAI's error envelope (both doors). */
function statusLine(status: number): string {
  const text: Record<number, string> = { 400: "Bad Request", 401: "Unauthorized", 426: "Upgrade Required", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable" };
  return `${status} ${text[status] ?? "Error"}`;
}

function openAiType(e: AppError): string {
  if (e.status === 401) return "authentication_error";
  if (e.status === 429) return "rate_limit_error";
  if (e.status >= 500) return "server_error";
  return "invalid_request_error";
}

/** Writes a refused upgrade: the OpenAI-style error envelope with the AppError's headers. */
export function writeRefusal(res: HttpResponse, e: AppError): void {
  res.writeStatus(statusLine(e.status));
  res.writeHeader("content-type", "application/json");
  for (const [k, v] of Object.entries(errorHeaders(e))) res.writeHeader(k, v);
  res.end(JSON.stringify({ error: { message: e.message, type: openAiType(e), code: e.code, ...(e.param ? { param: e.param } : {}) } }), true);
}

export const websocketRequired = (path: string) =>
  new AppError("validation", "websocket_required", `${path} is a WebSocket endpoint: send an HTTP/1.1 upgrade request (Connection: Upgrade, Upgrade: websocket).`, {
    status: 426,
    headers: { Upgrade: "websocket" },
  });

