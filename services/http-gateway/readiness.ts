import { sql } from "kysely";
import type { Readiness } from "../../schemas/http";
import type { ServiceContext } from "../../shared/service";

type Check = Readiness["checks"][string];

const timeout = <T>(p: Promise<T>, ms: number) =>
  Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms))]);

/**
 * Ready when NATS answers with every resource declared again since its last reconnect,
 * Postgres answers, every projection has caught up with its
 * stream, and the realtime gateway is enabled. "Caught up" compares each projection's
 * stored offset with the last sequence of its subjects in the stream, so it holds
 * whichever process runs the projector.
 */
export async function checkReadiness(ctx: ServiceContext): Promise<Readiness> {
  const checks: Record<string, Check> = {};
  // A round trip alone is not enough: after a nats-server restart the connection is
  // back before the streams, buckets and watches are (the adapter's health says which).
  const natsHealth = ctx.nats.health();
  checks.nats = natsHealth.ok
    ? await timeout(ctx.nats.nc.rtt(), 1000)
        .then((ms) => ({ ok: true, detail: `rtt ${ms.toFixed(1)} ms` }))
        .catch((e: Error) => ({ ok: false, detail: e.message }))
    : { ok: false, detail: `${natsHealth.reason ?? "unhealthy"} (for ${Math.round((Date.now() - (natsHealth.since ?? Date.now())) / 1000)} s)` };
  checks.postgres = await timeout(sql`select 1`.execute(ctx.db), 1000)
    .then(() => ({ ok: true }))
    .catch((e: Error) => ({ ok: false, detail: e.message }));
  if (checks.postgres.ok && checks.nats.ok) {
    const lags = await Promise.all(ctx.projections.map((p) => projectionLag(ctx, p.name, p.stream, p.filterSubject)));
    ctx.projections.forEach((p, i) => (checks[`projection:${p.name}`] = lags[i]!));
    checks.dead_letters = await deadLetters(ctx);
  }
  checks.realtime = ctx.slots.realtimeStatus?.() ?? { ok: ctx.config.gateway.enabled, detail: ctx.config.gateway.enabled ? "accepting" : "gateway disabled" };
  const ready = Object.values(checks).every((c) => c.ok);
  return { status: ready ? "ready" : "not_ready", checks };
}

async function projectionLag(ctx: ServiceContext, name: string, stream: string, filter: string): Promise<Check> {
  try {
    const row = await ctx.db.selectFrom("projection_offsets").select("last_seq").where("name", "=", name).executeTakeFirst();
    const applied = row ? Number(row.last_seq) : 0;
    const last = await ctx.nats.jsm.streams.getMessage(stream, { last_by_subj: filter }).catch(() => null);
    const head = last?.seq ?? 0;
    return { ok: applied >= head, detail: `applied ${applied} of ${head}` };
  } catch (e) {
    return { ok: false, detail: (e as Error).message };
  }
}

/**
 * Events the projections stepped over because they cannot be applied
 * (shared/projection.ts). Informational: a projection that moved past them is caught
 * up, so this check never makes the service unready; the count is for the operator.
 */
async function deadLetters(ctx: ServiceContext): Promise<Check> {
  try {
    const rows = await ctx.db.selectFrom("projection_dead_letters").select(["projection", (eb) => eb.fn.countAll<number>().as("n")]).groupBy("projection").orderBy("projection").execute();
    const total = rows.reduce((sum, r) => sum + Number(r.n), 0);
    return { ok: true, detail: total === 0 ? "0" : `${total} (${rows.map((r) => `${r.projection}: ${r.n}`).join(", ")})` };
  } catch (e) {
    return { ok: true, detail: `unknown: ${(e as Error).message}` };
  }
}
