import { unauthorized } from "../../shared/errors";

/**
 * Credentials in a WebSocket upgrade's `Sec-WebSocket-Protocol` header. Browsers cannot
 * set an Authorization header on a WebSocket, so OpenAI's SDK offers
 * `realtime, openai-insecure-api-key.<key or ek_ secret>` (plus `openai-beta.realtime-v1`
 * on the beta API). The key entry is a credential: it is read here and never answered.
 * Pure: no I/O.
 */

/** The entry that carries a credential; what follows the dot is the key or secret. */
const KEY_PROTOCOL_PREFIX = "openai-insecure-api-key.";
/** The protocol selected whenever the client offers it (the one OpenAI's clients require). */
const REALTIME_PROTOCOL = "realtime";
const BETA_PROTOCOL = "openai-beta.realtime-v1";

export interface OfferedProtocols {
  /** The offered protocols, credential entries left out, in the client's order. */
  protocols: string[];
  /** The credential of an `openai-insecure-api-key.` entry, or null without one. */
  credential: string | null;
  /** `openai-beta.realtime-v1` was offered (an OpenAI beta client). */
  beta: boolean;
}

/**
 * Splits a `Sec-WebSocket-Protocol` header value (absent: no protocols). Two credential
 * entries, or an empty one, are a 401 `invalid_api_key`: the server would otherwise have
 * to guess which key the client meant.
 */
export function parseWebSocketProtocols(header: string | undefined | null): OfferedProtocols {
  const entries = (header ?? "")
    .split(",")
    .map((e) => e.trim())
    .filter((e) => e !== "");
  const protocols: string[] = [];
  let credential: string | null = null;
  for (const entry of entries) {
    if (!entry.toLowerCase().startsWith(KEY_PROTOCOL_PREFIX)) {
      protocols.push(entry);
      continue;
    }
    const value = entry.slice(KEY_PROTOCOL_PREFIX.length);
    if (value === "" || credential !== null) {
      throw unauthorized("invalid_api_key", `Send exactly one non-empty '${KEY_PROTOCOL_PREFIX}<key>' subprotocol.`);
    }
    credential = value;
  }
  return { protocols, credential, beta: protocols.includes(BETA_PROTOCOL) };
}

/**
 * The protocol to answer an upgrade with: `realtime` when offered, else the first
 * offered protocol that is not a credential, else none (""). Never a credential entry,
 * and never the client's list verbatim. Does not throw: a malformed header is refused
 * by the authentication that reads it.
 */
export function protocolToAnswer(header: string | undefined | null): string {
  const offered = (header ?? "")
    .split(",")
    .map((e) => e.trim())
    .filter((e) => e !== "" && !e.toLowerCase().startsWith(KEY_PROTOCOL_PREFIX));
  return offered.includes(REALTIME_PROTOCOL) ? REALTIME_PROTOCOL : (offered[0] ?? "");
}
