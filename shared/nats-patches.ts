import { natsPatchActive } from "./metrics";
import { preallocateSpanningMessages } from "./nats-parser";
import { writeLargePayloadsInPlace } from "./nats-writer";

/**
 * The two patches of nats.js internals (shared/nats-parser.ts, shared/nats-writer.ts).
 * They replace methods of classes nats.js exports only as internals, so package.json
 * pins the exact `@nats-io/*` versions they were written against; each checks that the
 * internals it needs are there before it installs, and leaves nats.js as it came when
 * they are not. Which are active is exported as `stt_nats_patch_active{patch}` and logged
 * once at start (services/stt/runtime.ts); `stt_nats_patch_runs_total{patch}` counts
 * their own paths running.
 */
export type NatsPatch = "parser" | "writer";

/** Installs both patches (idempotent) and returns which are active. */
export function installNatsPatches(): Record<NatsPatch, boolean> {
  const active: Record<NatsPatch, boolean> = { parser: preallocateSpanningMessages(), writer: writeLargePayloadsInPlace() };
  for (const [patch, on] of Object.entries(active)) natsPatchActive.set({ patch }, on ? 1 : 0);
  return active;
}
