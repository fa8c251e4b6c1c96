import { startProjection } from "../../shared/projection";
import type { RunningService, ServiceContext } from "../context";

/** Runs every projection live, each from its stored offset. */
export async function startProjector(ctx: ServiceContext): Promise<RunningService> {
  const runners = await Promise.all(
    ctx.projections.map((p) => startProjection(ctx.nats, ctx.db, p, ctx.logger.child({ projection: p.name }))),
  );
  ctx.slots.projections = runners;
  return {
    name: "projector",
    stop: async () => {
      await Promise.all(runners.map((r) => r.stop()));
    },
  };
}
