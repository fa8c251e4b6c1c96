import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { AppError } from "../../shared/errors";

/**
 * The one stateless token format of the service: `<prefix>` base64url(JSON claims) "."
 * base64url(HMAC-SHA256(claims)), signed with GATEWAY_SESSION_TOKEN_SECRET. Browser
 * session tokens (`rt_`, auth.ts) and client secrets (`ek_`, client-secret.ts) are both
 * written and read here; what the claims mean, and whether a token is single use, is
 * theirs. Nothing is stored: the server holds only the signing secret.
 */

/** Constant-time string equality (lengths are hidden by hashing both sides first). */
export function safeEqual(a: string, b: string): boolean {
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb) && a.length === b.length;
}

function requireSecret(secret: string | undefined): string {
  if (!secret) {
    throw new AppError("unavailable", "token_issuer_unavailable", "Session tokens and client secrets are not available: GATEWAY_SESSION_TOKEN_SECRET is not configured.");
  }
  return secret;
}

const b64url = (buf: Buffer) => buf.toString("base64url");

/**
 * What the MAC covers. `rt_` tokens sign their payload alone, as they did before other
 * kinds existed (tokens in flight across a deploy stay valid); every other kind signs
 * prefix and payload, so a signature of one kind never verifies as another's. (A
 * payload always starts `eyJ`, the encoding of `{"`, so the two inputs cannot collide.)
 */
const macInput = (prefix: string, payload: string) => (prefix === "rt_" ? payload : prefix + payload);

const sign = (key: string, prefix: string, payload: string) => b64url(createHmac("sha256", key).update(macInput(prefix, payload)).digest());

/** Signs `claims` as a `prefix` token; 503 token_issuer_unavailable without a secret. */
export function signToken(secret: string | undefined, prefix: string, claims: object): string {
  const key = requireSecret(secret);
  const payload = b64url(Buffer.from(JSON.stringify(claims)));
  return `${prefix}${payload}.${sign(key, prefix, payload)}`;
}

/**
 * Checks a `prefix` token's signature and returns its claims (an object, not yet
 * validated: the caller parses them); `invalid` is what it throws otherwise. No expiry
 * check here: each kind reads its own `exp`.
 */
export function readSignedToken(secret: string | undefined, prefix: string, token: string, invalid: () => AppError): Record<string, unknown> {
  const key = requireSecret(secret);
  if (!token.startsWith(prefix)) throw invalid();
  const [payload, sig, extra] = token.slice(prefix.length).split(".");
  if (!payload || !sig || extra !== undefined) throw invalid();
  if (!safeEqual(sig, sign(key, prefix, payload))) throw invalid();
  let claims: unknown;
  try {
    claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  } catch {
    throw invalid();
  }
  if (claims === null || typeof claims !== "object" || Array.isArray(claims)) throw invalid();
  return claims as Record<string, unknown>;
}
