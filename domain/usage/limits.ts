import type { LimitOverrides, Limits, PlanCatalog } from "../../schemas/plans";
import { plans } from "../../shared/plans";

/** The plans of a catalog, in catalog order (built-in first). */
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
