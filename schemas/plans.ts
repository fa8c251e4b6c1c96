import { z } from "zod";

/**
 * The limits of a plan (spec 2.2 and 8) as they travel: in PLANS_FILE, in KeyIssued
 * (a key's own overrides), in the key and plan records of the admin API. The catalog
 * itself is config (shared/plans.ts); which limits a key works under is decided in
 * domain/usage/limits.ts.
 */
const limit = z.number().int().min(0).max(1_000_000_000);
export const limitsSchema = z.object({
  maxConcurrentConnections: limit,
  maxConcurrentUtterances: limit,
  maxConnectionsPerMinute: limit,
  maxRequestsPerMinute: limit,
  maxAudioSecondsPerRequest: limit,
  maxSessionSeconds: limit,
  maxAudioSecondsPerSession: limit,
  maxAudioSecondsPerWindow: limit,
  idleTimeoutSeconds: limit,
  /** How long a session whose connection was lost waits for a resume (default 30, at most 120: domain/sessions/resume.ts). */
  resumeGraceSeconds: z.number().int().min(1).max(120).optional(),
});
/** Per-key overrides: any subset of the limits, nothing else. */
export const limitOverridesSchema = limitsSchema.partial().strict();
export type LimitOverrides = z.infer<typeof limitOverridesSchema>;
export type Limits = z.infer<typeof limitsSchema>;

/** Plan name → limits. Always holds `free`. */
export type PlanCatalog = Readonly<Record<string, Limits>>;

const planName = z.string().regex(/^[a-z][a-z0-9_-]{0,63}$/, "lowercase letters, digits, _ and -, starting with a letter");
/** PLANS_FILE: `{"plans": {"team": {…all nine limits…}}}`. */
export const plansFileSchema = z.object({ plans: z.record(planName, limitsSchema) }).strict();
