import { readFileSync } from "node:fs";
import { z } from "zod";

/**
 * The plan catalog (spec 2.2 and 8). Free is the spec's; pro is ours: ten times the
 * throughput and a day of audio per window. An operator adds plans (or changes these
 * two) with PLANS_FILE (`loadPlanCatalog`), and a key can carry its own overrides of
 * its plan's limits (`resolveLimits`).
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
});
/** Per-key overrides: any subset of the limits, nothing else. */
export const limitOverridesSchema = limitsSchema.partial().strict();
export type LimitOverrides = z.infer<typeof limitOverridesSchema>;
export type Limits = z.infer<typeof limitsSchema>;

export const plans = {
  free: {
    maxConcurrentConnections: 1,
    maxConcurrentUtterances: 2,
    maxConnectionsPerMinute: 6,
    maxRequestsPerMinute: 12,
    maxAudioSecondsPerRequest: 900,
    maxSessionSeconds: 900,
    maxAudioSecondsPerSession: 900,
    maxAudioSecondsPerWindow: 3600,
    idleTimeoutSeconds: 60,
  },
  pro: {
    maxConcurrentConnections: 10,
    maxConcurrentUtterances: 4,
    maxConnectionsPerMinute: 60,
    maxRequestsPerMinute: 120,
    maxAudioSecondsPerRequest: 14_400,
    maxSessionSeconds: 14_400,
    maxAudioSecondsPerSession: 14_400,
    maxAudioSecondsPerWindow: 86_400,
    idleTimeoutSeconds: 300,
  },
} as const satisfies Record<string, Limits>;

export type PlanName = keyof typeof plans;

/** Plan name → limits. Always holds `free`. */
export type PlanCatalog = Readonly<Record<string, Limits>>;
export const defaultPlanCatalog: PlanCatalog = plans;

const planName = z.string().regex(/^[a-z][a-z0-9_-]{0,63}$/, "lowercase letters, digits, _ and -, starting with a letter");
const plansFileSchema = z.object({ plans: z.record(planName, limitsSchema) }).strict();

/**
 * The catalog of a process: the built-in plans, with those of PLANS_FILE (JSON:
 * `{"plans": {"team": {…all nine limits…}}}`) added or replacing them. Validated at
 * start; a bad file stops the process with the problem named.
 */
export function loadPlanCatalog(file: string | undefined): PlanCatalog {
  if (!file) return defaultPlanCatalog;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new Error(`PLANS_FILE ${file}: ${(err as Error).message}`);
  }
  const parsed = plansFileSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new Error(`PLANS_FILE ${file}: ${issue.path.join(".") || "file"}: ${issue.message}`);
  }
  return Object.freeze({ ...defaultPlanCatalog, ...parsed.data.plans });
}

export function planNamesOf(catalog: PlanCatalog): string[] {
  return Object.keys(catalog);
}

/**
 * The limits a key works under: its plan's (an unknown plan, e.g. one removed from
 * PLANS_FILE since the key was issued, resolves to free), with the key's own
 * overrides on top.
 */
export function resolveLimits(catalog: PlanCatalog, plan: string, overrides?: LimitOverrides | null): Limits {
  const base = Object.hasOwn(catalog, plan) ? catalog[plan]! : catalog.free ?? plans.free;
  return { ...base, ...(overrides ?? {}) };
}
