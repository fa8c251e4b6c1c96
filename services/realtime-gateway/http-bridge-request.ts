/**
 * Which plain HTTP requests the one-port bridge (http-bridge.ts) hands to the hono app,
 * and how the rest are refused: decided from the request line and Host alone.
 */

/** Methods the API serves; anything else is answered here, before the fetch API sees it. */
const SERVED_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);
/** Methods HTTP defines that the fetch API refuses to construct (`new Request` throws). */
const REFUSED_METHODS = new Set(["CONNECT", "TRACE", "TRACK"]);

/**
 * A Host header we can put in a URL: a DNS name, IPv4 or bracketed IPv6 literal, with
 * an optional port. Anything else (`a b`, `[::1`, `user@host`, `x:99999`, a path) is
 * refused, never parsed: the Host only names the authority, and the route comes from
 * the request line alone.
 */
const HOST_PATTERN = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})?)*\.?|\[[0-9A-Fa-f:.]{2,45}\])(?::(\d{1,5}))?$/;

export interface BridgeRequestParts {
  method: string;
  /** The request line's path, as sent. */
  path: string;
  /** The request line's query, without `?`. */
  query: string;
  headers: [string, string][];
}

export type BridgeDecision =
  | { kind: "fetch"; url: string; method: string }
  | { kind: "refuse"; status: 400 | 405 | 501; code: string; message: string; headers?: Record<string, string> };

/**
 * What the bridge does with a request line and Host, decided before any fetch-API
 * object is built (those throw on hostile input, and a throw inside a uWS handler ends
 * the process). Pure, so every hostile case is a unit test.
 */
export function decideBridge(parts: BridgeRequestParts): BridgeDecision {
  const method = parts.method.toUpperCase();
  if (REFUSED_METHODS.has(method)) {
    return { kind: "refuse", status: 405, code: "method_not_allowed", message: `${method} is not allowed on this server`, headers: { Allow: [...SERVED_METHODS].join(", ") } };
  }
  if (!SERVED_METHODS.has(method)) {
    return { kind: "refuse", status: 501, code: "method_not_implemented", message: `this server does not implement the ${JSON.stringify(method.slice(0, 32))} method` };
  }
  if (!parts.path.startsWith("/")) {
    return { kind: "refuse", status: 400, code: "invalid_request_target", message: "the request target must be a path starting with /" };
  }
  const hosts = parts.headers.filter(([k]) => k === "host");
  if (hosts.length > 1) return { kind: "refuse", status: 400, code: "invalid_host", message: "the request has more than one Host header" };
  const host = hosts[0]?.[1] || "localhost";
  const m = HOST_PATTERN.exec(host);
  if (!m || (m[1] !== undefined && Number(m[1]) > 65535)) {
    return { kind: "refuse", status: 400, code: "invalid_host", message: "the Host header is not a valid host[:port]" };
  }
  // `#` and `\` would be read by the URL parser as a fragment and a separator: keep them
  // as path characters so the route is exactly the request line's path.
  const path = parts.path.replace(/[#\\]/g, (ch) => encodeURIComponent(ch));
  const url = `http://${host}${path}${parts.query ? `?${parts.query.replace(/#/g, "%23")}` : ""}`;
  try {
    new URL(url);
  } catch {
    return { kind: "refuse", status: 400, code: "invalid_request_target", message: "the request target is not a valid URL path" };
  }
  return { kind: "fetch", url, method };
}
