import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { TranscriptionSessionPreset } from "../../schemas/client-secrets";
import type { Limits, PlanCatalog } from "../../schemas/plans";
import type { Db } from "../../shared/db/index";
import { unauthorized } from "../../shared/errors";
import { plans as builtInPlans } from "../../shared/plans";
import { resolveLimits } from "../usage/limits";
import { readKeyByHash, readKeyForAuth, type KeyRow } from "./queries";
import { readSignedToken, safeEqual, signToken } from "./signed-token";

/**
 * Authentication shared by the HTTP and realtime gateways: API keys (Bearer `sk-…`,
 * looked up by SHA-256 in the api_keys read model), browser session tokens (`rt_…`,
 * HMAC-SHA256, 60 s, single use, bound to the issuing key), client secrets (`ek_…`,
 * the same signing, reusable until they expire: client-secret.ts) and the operator's
 * admin token.
 */
export interface Principal {
  keyId: string;
  ownerId: string;
  plan: string;
  limits: Limits;
  lastUsedAt: Date | null;
  expiresAt: Date | null;
  /** How the caller authenticated. */
  via: "api_key" | "session_token" | "client_secret";
  /**
   * The session configuration a client secret was issued with (`ek_` only; GA-shaped,
   * validated: schemas/client-secrets.ts). The OpenAI-compatible door applies it as the
   * session's initial configuration; the client's session.update may override it.
   */
  presetSession?: TranscriptionSessionPreset;
}

const KEY_PREFIX = "sk-";
const KEY_MIN_LENGTH = 16;
export const SESSION_TOKEN_PREFIX = "rt_";
export const SESSION_TOKEN_TTL_SECONDS = 60;
export const CLIENT_SECRET_PREFIX = "ek_";

export function sha256Hex(value: string): string {
  return createHash("sha256").update(value, "utf8").digest("hex");
}

/** A new key: `sk-` + 43 base62 characters (≈256 bits of entropy). */
export function generateApiKey(): { key: string; keyHash: string; keyPrefix: string; lastFour: string } {
  const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  let body = "";
  while (body.length < 43) {
    for (const byte of randomBytes(64)) {
      // 248 = 62 * 4: reject the tail to keep the distribution uniform.
      if (byte < 248 && body.length < 43) body += alphabet[byte % 62];
    }
  }
  const key = KEY_PREFIX + body;
  return { key, keyHash: sha256Hex(key), keyPrefix: key.slice(0, 11), lastFour: key.slice(-4) };
}

export function newKeyId(): string {
  return `key_${randomUUID().replace(/-/g, "")}`;
}

/** Format rules of spec 2.1: prefix `sk-`, at least 16 characters, 13 after the prefix. */
function isWellFormedKey(value: string): boolean {
  return value.startsWith(KEY_PREFIX) && value.length >= KEY_MIN_LENGTH && /^[\x21-\x7e]+$/.test(value);
}

/** Extracts the Bearer credential; throws missing_api_key when absent. */
export function bearerCredential(authorization: string | undefined | null): string {
  if (!authorization || authorization.trim() === "") {
    throw unauthorized("missing_api_key", "Missing API key. Send it as 'Authorization: Bearer sk-…'.");
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization.trim());
  if (!match) throw unauthorized("invalid_api_key", "Malformed Authorization header; expected 'Bearer <API key>'.");
  return match[1]!;
}

/**
 * Keys and client secrets must never travel in URLs (proxies, logs and browser history
 * keep them): refuse any query value that looks like one. A client secret is reusable
 * for up to two hours, unlike a single-use `rt_` token, the one credential a URL may carry.
 */
export function refuseKeysInUrl(url: URL): void {
  const places = [url.pathname, ...[...url.searchParams].flat()];
  for (const place of places) {
    for (const text of decodings(place)) {
      const found = KEY_LIKE.exec(text)?.[1];
      if (found === KEY_PREFIX) throw unauthorized("invalid_api_key", "API keys must not be sent in URLs; use the Authorization header (browsers: a session token).");
      if (found === CLIENT_SECRET_PREFIX) {
        throw unauthorized("invalid_api_key", "Client secrets must not be sent in URLs; send 'Authorization: Bearer ek_…' or, from a browser, the WebSocket subprotocol 'openai-insecure-api-key.ek_…'.");
      }
    }
  }
}

/**
 * A key or client secret anywhere in a piece of a URL: at its start or after anything
 * that is not part of a key (a space, "Bearer ", a quote, a slash), followed by what a
 * key is made of. So `?api_key=%20sk-…`, `?authorization=Bearer%20sk-…` and a key in a
 * path segment are refused, not only a query value that starts with one.
 */
const KEY_LIKE = new RegExp(`(?:^|[^A-Za-z0-9_-])(${KEY_PREFIX}|${CLIENT_SECRET_PREFIX})[A-Za-z0-9_-]{8,}`);

/** A piece of a URL as given (the URL parser decoded it once) and decoded once more: a key encoded twice is still a key. */
function decodings(text: string): string[] {
  try {
    const again = decodeURIComponent(text);
    return again === text ? [text] : [text, again];
  } catch {
    return [text];
  }
}

export function principalFromRow(row: KeyRow, now: Date, via: Principal["via"], plans: PlanCatalog): Principal {
  if (row.revoked_at) throw unauthorized("revoked_api_key", "This API key has been revoked.");
  if (row.expires_at && row.expires_at.getTime() <= now.getTime()) throw unauthorized("expired_api_key", "This API key has expired.");
  return { keyId: row.id, ownerId: row.owner_id, plan: row.plan, limits: resolveLimits(plans, row.plan, row.limit_overrides), lastUsedAt: row.last_used_at, expiresAt: row.expires_at, via };
}

/** The SHA-256 of a Bearer `sk-` key, after the format checks (401 when it fails them). */
export function bearerKeyHash(authorization: string | undefined | null): string {
  const key = bearerCredential(authorization);
  if (!isWellFormedKey(key)) throw unauthorized("invalid_api_key", "Invalid API key format; keys start with 'sk-' and are at least 16 characters.");
  return sha256Hex(key);
}

/** 401 unless `row` is the key of `hash` (compared in constant time). */
export function assertKeyRow(row: KeyRow | undefined, hash: string): asserts row is KeyRow {
  // The lookup is by hash, so timing reveals nothing about the key; compare anyway.
  if (!row || !safeEqual(row.key_hash, hash)) throw unauthorized("invalid_api_key", "Invalid API key.");
}

/** Authenticates an `sk-` key from an Authorization header value. */
export async function authenticateApiKey(db: Db, authorization: string | undefined | null, now: Date, plans: PlanCatalog = builtInPlans): Promise<Principal> {
  const hash = bearerKeyHash(authorization);
  const row = await readKeyByHash(db, hash);
  assertKeyRow(row, hash);
  return principalFromRow(row, now, "api_key", plans);
}

/** Looks up a key by id (session tokens, client secrets); same status rules as a Bearer key. */
export async function principalForKeyId(db: Db, keyId: string, now: Date, via: Principal["via"], plans: PlanCatalog = builtInPlans): Promise<Principal> {
  const row = await readKeyForAuth(db, keyId);
  if (!row) {
    if (via === "client_secret") throw unauthorized("invalid_api_key", "The client secret's key no longer exists.");
    throw unauthorized("invalid_session_token", "The session token's key no longer exists.");
  }
  return principalFromRow(row, now, via, plans);
}

interface SessionClaims {
  /** key id the token was issued for */
  kid: string;
  /** owner (tenant) id */
  own: string;
  iat: number;
  exp: number;
  /** unique token id */
  jti: string;
}

/** Issues an `rt_` token (signed-token.ts), valid SESSION_TOKEN_TTL_SECONDS. */
export function issueSessionToken(secret: string | undefined, principal: Principal, now: Date): { token: string; expiresIn: number } {
  const iat = Math.floor(now.getTime() / 1000);
  const claims: SessionClaims = { kid: principal.keyId, own: principal.ownerId, iat, exp: iat + SESSION_TOKEN_TTL_SECONDS, jti: randomUUID() };
  return { token: signToken(secret, SESSION_TOKEN_PREFIX, claims), expiresIn: SESSION_TOKEN_TTL_SECONDS };
}

const tokenIdPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Checks an `rt_` token's signature, shape and expiry (no I/O); returns its claims. */
function readSessionToken(secret: string | undefined, token: string, now: Date): SessionClaims {
  const invalid = () => unauthorized("invalid_session_token", "Invalid or expired session token.");
  const claims = readSignedToken(secret, SESSION_TOKEN_PREFIX, token, invalid);
  if (typeof claims.exp !== "number" || typeof claims.kid !== "string") throw invalid();
  // Every token this service issued carries a UUID jti; it names the token's spent marker.
  if (typeof claims.jti !== "string" || !tokenIdPattern.test(claims.jti)) throw invalid();
  if (claims.exp <= Math.floor(now.getTime() / 1000)) throw invalid();
  return claims as unknown as SessionClaims;
}

/**
 * Verifies an `rt_` token and resolves the key it is bound to: a token of a key
 * revoked or expired since issue is refused. Does not spend the token (see
 * redeemSessionToken, which the realtime upgrade uses).
 */
export async function verifySessionToken(db: Db, secret: string | undefined, token: string, now: Date, plans: PlanCatalog = builtInPlans): Promise<Principal> {
  const claims = readSessionToken(secret, token, now);
  return principalForKeyId(db, claims.kid, now, "session_token", plans);
}

/**
 * Marks a session token as spent, atomically for every gateway sharing the store, and
 * keeps the mark at least until `expiresAt` (epoch seconds), after which the token is
 * refused as expired anyway. Resolves false when the token was already spent.
 */
export type SpendSessionToken = (tokenId: string, expiresAt: number) => Promise<boolean>;

/**
 * Verifies an `rt_` token like verifySessionToken and spends it: a token opens one
 * connection. A second presentation (replayed, leaked from a URL, or simply reused)
 * is 401 `invalid_session_token`, the spec's code for an invalid token (7.1). The
 * token is spent once it has verified, before the later admission checks, so an
 * upgrade refused for another reason (rate, concurrency) also uses it up.
 */
export async function redeemSessionToken(
  db: Db,
  secret: string | undefined,
  token: string,
  now: Date,
  spend: SpendSessionToken,
  plans: PlanCatalog = builtInPlans,
): Promise<Principal> {
  const claims = readSessionToken(secret, token, now);
  const principal = await principalForKeyId(db, claims.kid, now, "session_token", plans);
  if (!(await spend(claims.jti, claims.exp))) {
    throw unauthorized("invalid_session_token", "This session token was already used; a session token opens one connection, request a new one.");
  }
  return principal;
}

/** Checks the operator token (constant time); throws admin_unauthorized. */
export function verifyAdminToken(configured: string | undefined, authorization: string | undefined | null): void {
  const fail = () => unauthorized("admin_unauthorized", "An admin token is required: send 'Authorization: Bearer <GATEWAY_ADMIN_TOKEN>'.");
  if (!configured) throw fail();
  const match = /^Bearer\s+(\S+)\s*$/i.exec((authorization ?? "").trim());
  if (!match || !safeEqual(match[1]!, configured)) throw fail();
}
