import { randomUUID } from "node:crypto";
import { z } from "zod";
import { CLIENT_SECRET_TTL, transcriptionSessionPreset, type TranscriptionSessionPreset } from "../../schemas/client-secrets";
import type { PlanCatalog } from "../../schemas/plans";
import type { Db } from "../../shared/db/index";
import { unauthorized } from "../../shared/errors";
import { plans as builtInPlans } from "../../shared/plans";
import { CLIENT_SECRET_PREFIX, principalForKeyId, type Principal } from "./auth";
import { readSignedToken, signToken } from "./signed-token";

/**
 * Client secrets (`ek_…`, OpenAI's ephemeral keys): signed like `rt_` session tokens
 * (signed-token.ts, nothing stored), bound to the issuing key (its revocation or expiry
 * refuses them, its plan governs every connection), valid until `exp` and, unlike `rt_`
 * tokens, reusable: each connection made with one is admitted, and counted against the
 * plan, like any other. They also carry the session configuration given at issuance.
 * The payload is signed, not encrypted: whoever holds the secret can read that
 * configuration, which is the caller's own.
 */

const claimsSchema = z.object({
  /** key id the secret was issued for */
  kid: z.string(),
  /** owner (tenant) id */
  own: z.string(),
  iat: z.number(),
  exp: z.number(),
  jti: z.string(),
  /** the session configuration given at issuance */
  ses: transcriptionSessionPreset.optional(),
});
type ClientSecretClaims = z.infer<typeof claimsSchema>;

/**
 * Issues an `ek_` secret for `principal`, valid `ttlSeconds` (the route has checked
 * CLIENT_SECRET_TTL's bounds); `session` rides in the secret.
 */
export function issueClientSecret(
  secret: string | undefined,
  principal: Principal,
  now: Date,
  ttlSeconds: number = CLIENT_SECRET_TTL.defaultSeconds,
  session?: TranscriptionSessionPreset,
): { value: string; expiresAt: number } {
  const iat = Math.floor(now.getTime() / 1000);
  const claims: ClientSecretClaims = { kid: principal.keyId, own: principal.ownerId, iat, exp: iat + ttlSeconds, jti: randomUUID(), ...(session ? { ses: session } : {}) };
  return { value: signToken(secret, CLIENT_SECRET_PREFIX, claims), expiresAt: claims.exp };
}

/**
 * Verifies an `ek_` secret (signature, expiry) and resolves the key it is bound to, with
 * the secret's session configuration as `presetSession`. Does not use the secret up.
 * Every refusal is 401: `invalid_api_key` (forged, malformed, expired, key gone),
 * `revoked_api_key` or `expired_api_key` (the issuing key's state).
 */
export async function verifyClientSecret(db: Db, secret: string | undefined, value: string, now: Date, plans: PlanCatalog = builtInPlans): Promise<Principal> {
  const invalid = () => unauthorized("invalid_api_key", "Invalid or expired client secret.");
  const parsed = claimsSchema.safeParse(readSignedToken(secret, CLIENT_SECRET_PREFIX, value, invalid));
  if (!parsed.success) throw invalid();
  const claims = parsed.data;
  if (claims.exp <= Math.floor(now.getTime() / 1000)) throw invalid();
  const principal = await principalForKeyId(db, claims.kid, now, "client_secret", plans);
  return claims.ses ? { ...principal, presetSession: claims.ses } : principal;
}
