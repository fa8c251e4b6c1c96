import { z } from "@hono/zod-openapi";
import { limitOverridesSchema, limitsSchema } from "./plans";
import { safeString } from "./safe-string";

/**
 * HTTP bodies and responses of the foundation routes (admin keys, plans, session
 * tokens, health) and the error envelopes. Importing `z` from @hono/zod-openapi gives
 * the same zod with `.openapi()` metadata; these schemas validate requests and
 * generate /openapi.json.
 */
const limits = z.object(limitsSchema.shape).openapi("Limits");

export const openAiError = z
  .object({
    error: z.object({
      message: z.string(),
      type: z.string(),
      code: z.string().nullable(),
      param: z.string().nullable().optional(),
    }),
  })
  .openapi("Error");

export const adminError = z
  .object({
    ok: z.literal(false),
    error: z.object({ code: z.string(), message: z.string(), retryable: z.boolean() }),
  })
  .openapi("AdminError");

/**
 * The fields of KeyIssued: every string is a safeString (schemas/safe-string.ts), so one
 * that Postgres cannot store is refused with 400 `invalid_string` before it is appended.
 */
export const issueKeyBody = z
  .object({
    owner_id: safeString(200).min(1).regex(/^[A-Za-z0-9._:@-]+$/, "letters, digits and . _ : @ -").default("default"),
    plan: safeString(64).min(1).default("free"),
    label: safeString(500).optional(),
    expires_at: z.iso.datetime({ offset: true }).optional(),
    limits: limitOverridesSchema
      .optional()
      .describe("This key's own overrides of its plan's limits, e.g. {\"maxRequestsPerMinute\": 5000}; the rest come from the plan."),
  })
  .openapi("IssueKeyRequest");

export const keyRecord = z
  .object({
    id: z.string(),
    ownerId: z.string(),
    keyPrefix: z.string(),
    lastFour: z.string(),
    plan: z.string(),
    status: z.enum(["active", "revoked", "expired"]),
    label: z.string().nullable(),
    expiresAt: z.string().nullable(),
    revokedAt: z.string().nullable(),
    lastUsedAt: z.string().nullable(),
    createdAt: z.string(),
    limits: limits.describe("The limits the key works under: its plan's, with its overrides applied."),
    limitOverrides: limitOverridesSchema.nullable().describe("The key's own overrides (null: none)."),
  })
  .openapi("ApiKey");
export type KeyRecord = z.infer<typeof keyRecord>;

export const issuedKeyRecord = keyRecord.extend({ key: z.string().describe("Plaintext key; returned only here, never again.") }).openapi("IssuedApiKey");

export const ok = <T extends z.ZodTypeAny>(data: T) => z.object({ ok: z.literal(true), data });

// Read routes too: a NUL in a query would otherwise reach Postgres as a 500.
export const listKeysQuery = z.object({ owner_id: safeString(200).optional() });
export const keyIdParam = z.object({ id: safeString(128).min(1).openapi({ param: { name: "id", in: "path" } }) });

export const planEntry = z.object({ plan: z.string(), limits }).openapi("Plan");

export const sessionToken = z
  .object({
    token: z.string().describe("rt_ token, HMAC-SHA256 signed"),
    expires_in: z.number().int(),
    endpoint: z.string(),
  })
  .openapi("SessionToken");

export const health = z
  .object({
    status: z.enum(["ok", "degraded"]).describe("`degraded` (with 503) once the process has failed to recover for longer than NATS_UNHEALTHY_LIVENESS_MS: restart it"),
    uptime_seconds: z.number(),
    reason: z.string().optional().describe("why the process is not healthy, also during a spell shorter than the bound"),
    unhealthy_seconds: z.number().optional().describe("how long the current unhealthy spell has lasted"),
  })
  .openapi("Health");
export const readiness = z
  .object({
    status: z.enum(["ready", "not_ready"]),
    checks: z.record(z.string(), z.object({ ok: z.boolean(), detail: z.string().optional() })),
  })
  .openapi("Readiness");
export type Readiness = z.infer<typeof readiness>;
export type Health = z.infer<typeof health>;

/** GET /v1/usage: the calling key's plan, limits and what it has used. */
export const usageView = z
  .object({
    object: z.literal("usage"),
    key_id: z.string(),
    owner_id: z.string(),
    plan: z.string(),
    limits: limits,
    window: z.object({ start: z.string(), end: z.string(), seconds: z.number().int() }).describe("The current billing window (USAGE_WINDOW_SECONDS, UTC-aligned)."),
    audio_seconds: z.object({ used: z.number(), remaining: z.number(), limit: z.number() }).describe("Audio of every plane in this window, from the usage read model."),
    requests: z
      .object({ window: z.number().int(), current_minute: z.number().int(), per_minute_limit: z.number().int() })
      .describe("Billed requests in this window; counted requests (segment, job submit, session token) in the current minute."),
  })
  .openapi("Usage");
export type UsageView = z.infer<typeof usageView>;

export const ownerUsageQuery = z.object({ owner_id: safeString(200).min(1) });
export const ownerUsage = z
  .object({
    owner_id: z.string(),
    window: z.object({ start: z.string(), end: z.string(), seconds: z.number().int() }),
    keys: z.array(z.object({ key_id: z.string(), plan: z.string(), audio_seconds: z.number(), requests: z.number().int(), audio_limit: z.number() })),
    audio_seconds: z.number(),
    requests: z.number().int(),
  })
  .openapi("OwnerUsage");
