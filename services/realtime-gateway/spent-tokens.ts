import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import { SESSION_TOKEN_TTL_SECONDS, type SpendSessionToken } from "../../domain/keys/auth";
import { AppError, isAppError } from "../../shared/errors";
import type { Nats } from "../../shared/nats";

/**
 * Spent session tokens, shared by every gateway on one NATS: one entry per token id
 * (`rt_token.<jti>`) in the `leases` bucket, written with KV `create`, which succeeds
 * only when the key is absent. Two gateways presenting the same token at once are
 * decided by the stream's expected-last-sequence check: exactly one create succeeds.
 *
 * nats-server 2.9 has no per-key TTL; the bucket's max age (10 min) removes the
 * entries, long after the token's 60 s lifetime, past which the signature check
 * refuses the token anyway. The bucket is in memory: a NATS restart forgets spent
 * tokens, so a token spent in the minute before the restart could open one more
 * connection after it.
 */
const spentTokenKey = (tokenId: string) => `rt_token.${tokenId}`;

/** True when `create` failed because the key already exists (not an outage). */
function alreadyExists(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

/**
 * A SpendSessionToken over the `leases` bucket of `nats`. Store errors fail closed:
 * 503 `auth_unavailable`, never an admission.
 */
export function spendTokensInLeases(nats: Nats): SpendSessionToken {
  const maxAgeMs = nats.topology.buckets.leases.ttlMs;
  if (maxAgeMs !== 0 && maxAgeMs < SESSION_TOKEN_TTL_SECONDS * 1000) {
    throw new Error(`the leases bucket keeps entries ${maxAgeMs} ms, less than a session token lives`);
  }
  return async (tokenId, expiresAt) => {
    try {
      const kv = await nats.kv("leases");
      await kv.create(spentTokenKey(tokenId), JSON.stringify({ exp: expiresAt }));
      return true;
    } catch (err) {
      if (alreadyExists(err)) return false;
      if (isAppError(err)) throw err; // already classified (e.g. 503 nats_unavailable)
      throw new AppError("unavailable", "auth_unavailable", "Session tokens cannot be checked right now; retry shortly.", { retryable: true, cause: err });
    }
  };
}
