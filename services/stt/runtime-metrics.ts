import { countJobsByStatus } from "../../domain/jobs/queries";
import type { ServiceContext } from "../context";
import { addScrapeCollector, consumerAckPending, consumerPending, jobsByStatus, projectionLag, workersCapacity, workersGauge, workersInFlight } from "../../shared/metrics";

/**
 * The scrape-time gauges of one runtime (shared/metrics.ts): workers as this process's
 * router sees them, every durable consumer's lag, jobs by status in the read model,
 * and each projection's lag behind its stream. Read when /metrics is scraped, so they
 * cost nothing between scrapes. Returns the unregister function.
 */
export function registerRuntimeMetrics(ctx: ServiceContext): () => void {
  const { nats, db } = ctx;
  return addScrapeCollector(async () => {
    const workers = ctx.router?.workers?.() ?? [];
    workersGauge.reset();
    workersInFlight.reset();
    workersCapacity.reset();
    for (const w of workers) {
      workersGauge.inc({ kind: w.kind, state: w.warm ? "warm" : "cold" });
      workersInFlight.inc({ kind: w.kind }, w.inFlight);
      if (w.warm) workersCapacity.inc({ kind: w.kind }, w.concurrency);
    }

    const streams = Object.values(nats.topology.streams).map((s) => s.name);
    const lastSeq = new Map<string, number>();
    consumerPending.reset();
    consumerAckPending.reset();
    await Promise.all(
      streams.map(async (stream) => {
        const info = await nats.jsm.streams.info(stream).catch(() => null);
        if (info) lastSeq.set(stream, info.state.last_seq);
        const consumers = await nats.jsm.consumers.list(stream).next().catch(() => []);
        for (const c of consumers) {
          if (!c.config.durable_name) continue; // ordered consumers (projections, readers) are measured below
          consumerPending.set({ stream, durable: c.config.durable_name }, c.num_pending);
          consumerAckPending.set({ stream, durable: c.config.durable_name }, c.num_ack_pending);
        }
      }),
    );

    const offsets = await db.selectFrom("projection_offsets").select(["name", "last_seq"]).execute().catch(() => []);
    for (const p of ctx.projections) {
      const applied = Number(offsets.find((o) => o.name === p.name)?.last_seq ?? 0);
      const last = lastSeq.get(p.stream);
      if (last !== undefined) projectionLag.set({ projection: p.name }, Math.max(0, last - applied));
    }

    const rows = await countJobsByStatus(db).catch(() => null);
    if (rows) {
      jobsByStatus.reset();
      for (const r of rows) jobsByStatus.set({ status: r.status }, r.count);
    }
  });
}
