import type { Migration } from "kysely";
import * as foundation from "./20261122_0001_foundation";
import * as jobs from "./20261122_0200_jobs";
import * as projectionDeadLetters from "./20261122_0300_projection_dead_letters";
import * as keyLimitOverrides from "./20261123_0400_key_limit_overrides";

/** Every migration, by name; names sort in the order they run. */
export const migrations: Record<string, Migration> = {
  "20261122_0001_foundation": foundation,
  "20261122_0200_jobs": jobs,
  "20261122_0300_projection_dead_letters": projectionDeadLetters,
  "20261123_0400_key_limit_overrides": keyLimitOverrides,
};
