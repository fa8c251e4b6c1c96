import { z } from "zod";

/**
 * The plan catalog (spec 2.2 and 8). Free is the spec's; pro is ours: ten times the
 * throughput and a day of audio per window. Add a plan here and it appears in the
 * public catalog and becomes valid for keys.
 */
export const limitsSchema = z.object({
  maxConcurrentConnections: z.number().int(),
  maxConcurrentUtterances: z.number().int(),
  maxConnectionsPerMinute: z.number().int(),
  maxRequestsPerMinute: z.number().int(),
  maxAudioSecondsPerRequest: z.number().int(),
  maxSessionSeconds: z.number().int(),
  maxAudioSecondsPerSession: z.number().int(),
  maxAudioSecondsPerWindow: z.number().int(),
  idleTimeoutSeconds: z.number().int(),
});
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
export const planNames = Object.keys(plans) as PlanName[];

export function isPlanName(name: string): name is PlanName {
  return Object.hasOwn(plans, name);
}

/** Resolved limits of a plan; unknown names resolve to free (keys are validated at issue). */
export function planLimits(name: string): Limits {
  return { ...(isPlanName(name) ? plans[name] : plans.free) };
}
