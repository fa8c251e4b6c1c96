import { readFileSync } from "node:fs";
import { plansFileSchema, type Limits, type PlanCatalog } from "../schemas/plans";

/**
 * The plan catalog a process runs with. Free is the spec's; pro is ours: ten times the
 * throughput and a day of audio per window. An operator adds plans (or changes these
 * two) with PLANS_FILE (`loadPlanCatalog`, read by shared/config.ts); a key can carry
 * its own overrides of its plan's limits (domain/usage/limits.ts `resolveLimits`).
 */
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



/**
 * The catalog of a process: the built-in plans, with those of PLANS_FILE (JSON:
 * `{"plans": {"team": {…all nine limits…}}}`) added or replacing them. Validated at
 * start; a bad file stops the process with the problem named.
 */
export function loadPlanCatalog(file: string | undefined): PlanCatalog {
  if (!file) return plans;
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
  return Object.freeze({ ...plans, ...parsed.data.plans });
}
