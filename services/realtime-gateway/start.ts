import type { RunningService, ServiceContext } from "../context";
import { startRealtimeGateway } from "./gateway";

/**
 * The realtime-gateway service: the uWS listener on the service port. When the
 * http-gateway runs in this process its hono app is served on the same listener (one
 * base URL); it must start first (services.ts order) so its fetch handler is in the slot.
 */
export async function startRealtimeGatewayService(ctx: ServiceContext): Promise<RunningService> {
  const gateway = await startRealtimeGateway(
    { config: ctx.config, nats: ctx.nats, db: ctx.db, logger: ctx.logger.child({ service: "realtime-gateway" }), get router() { return ctx.router; } },
    { fetch: ctx.slots.httpFetch, keys: ctx.slots.keys, now: ctx.now },
  );
  ctx.slots.port = gateway.port;
  ctx.slots.realtimeStatus = gateway.status;
  return { name: "realtime-gateway", stop: () => gateway.stop() };
}
