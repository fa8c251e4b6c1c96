import { z } from "zod";
import { envelopeOf } from "../../schemas/envelope";
import { limitOverridesSchema, type LimitOverrides } from "../../schemas/plans";

/**
 * Events of the ApiKey aggregate (subject `<prefix>.key.evt.<keyId>`), written only
 * through the key store (store.ts). The admin API's bodies and records are in
 * schemas/http.ts.
 */
const keyIssued = z.object({
  type: z.literal("KeyIssued"),
  data: z.object({
    keyId: z.string(),
    ownerId: z.string(),
    /** SHA-256 of the plaintext key, hex. The plaintext never enters the log. */
    keyHash: z.string().regex(/^[0-9a-f]{64}$/),
    keyPrefix: z.string(),
    lastFour: z.string(),
    plan: z.string(),
    label: z.string().nullable(),
    expiresAt: z.string().nullable(),
    issuedAt: z.string(),
    /** Added later: the key's own overrides of its plan's limits; absent = none. */
    limits: limitOverridesSchema.optional(),
  }),
});
const keyRevoked = z.object({
  type: z.literal("KeyRevoked"),
  data: z.object({ keyId: z.string(), revokedAt: z.string() }),
});
/** Recorded at most about once a minute per key, for `lastUsedAt`. */
const keyUsed = z.object({
  type: z.literal("KeyUsed"),
  data: z.object({ keyId: z.string(), usedAt: z.string() }),
});
const keyEvent = z.discriminatedUnion("type", [keyIssued, keyRevoked, keyUsed]);
export type KeyEvent = z.infer<typeof keyEvent>;
export const keyEventEnvelope = envelopeOf(keyEvent);

/** Commands of the ApiKey aggregate. Ids, hashes and time come in with the command. */
export type KeyCommand =
  | {
      type: "IssueKey";
      data: {
        keyId: string;
        ownerId: string;
        keyHash: string;
        keyPrefix: string;
        lastFour: string;
        plan: string;
        label: string | null;
        expiresAt: string | null;
        limits?: LimitOverrides;
        now: string;
      };
    }
  | { type: "RevokeKey"; data: { keyId: string; now: string } }
  | { type: "RecordKeyUse"; data: { keyId: string; now: string } };
