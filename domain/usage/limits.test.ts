import { describe, expect, it } from "vitest";
import type { PlanCatalog } from "../../schemas/plans";
import { plans } from "../../shared/plans";
import { planNamesOf, resolveLimits } from "./limits";

const team = { ...plans.pro, maxRequestsPerMinute: 3 };
const catalog: PlanCatalog = { ...plans, team };

describe("plan limits", () => {
  it("a key works under its plan's limits", () => {
    expect(resolveLimits(catalog, "team")).toEqual(team);
    expect(resolveLimits(catalog, "pro", null)).toEqual(plans.pro);
  });

  it("an unknown plan resolves to free, also a name inherited from Object", () => {
    expect(resolveLimits(catalog, "gone")).toEqual(plans.free);
    expect(resolveLimits(catalog, "constructor")).toEqual(plans.free);
  });

  it("a catalog without free falls back to the built-in free", () => {
    expect(resolveLimits({ team }, "gone")).toEqual(plans.free);
  });

  it("the key's overrides win, the rest stays its plan's", () => {
    expect(resolveLimits(catalog, "free", { maxRequestsPerMinute: 2 })).toEqual({ ...plans.free, maxRequestsPerMinute: 2 });
    expect(resolveLimits(catalog, "free", { maxAudioSecondsPerWindow: 0 }).maxAudioSecondsPerWindow).toBe(0);
  });

  it("lists the catalog's plans", () => {
    expect(planNamesOf(catalog)).toEqual(["free", "pro", "team"]);
  });
});
