import { sql } from "kysely";
import type { Readiness } from "../../schemas/http";
import type { Projection } from "../../shared/projection";
import type { ServiceContext } from "../context";
import { judgeProjectionLag, judgeSegmentPlane, type Check } from "./readiness-rules";


const timeout = <T>(p: Promise<T>, ms: number) =>
  Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms))]);

/**
 * Ready when this instance can serve its planes now (readiness-rules.ts judges):
 *
 * - `nats`: connected, every stream, bucket, watch and consumer declared again since the
 *   last reconnect, and a round trip within 1 s.
 * - `postgres`: `select 1` within 1 s.
 * - `projection:<name>`: how long the oldest unapplied event of its subjects has waited
 *   (stream time of the first event after its stored offset, so it holds whichever
 *   process runs the projector); `bounded` read models fail past
 *   READINESS_PROJECTION_MAX_LAG_MS, `informational` ones (jobs) only report it.
 * - `dead_letters`: informational.
 * - `segment`: NATS ready and a warm worker announced since the last reconnect (or a
 *   fallback provider) in this process's router.
 * - `realtime`: the gateway switch and the router's availability.
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
    const lags = await Promise.all(ctx.projections.map((p) => projectionLag(ctx, p)));
    ctx.projections.forEach((p, i) => (checks[`projection:${p.name}`] = lags[i]!));
    checks.dead_letters = await deadLetters(ctx);
  }
  if (ctx.router?.rotation) {
    const { warm, leftOut } = ctx.router.rotation();
    checks.segment = judgeSegmentPlane({ natsOk: checks.nats.ok, warmWorkers: warm, leftOut, hasFallback: ctx.router.hasFallback?.() ?? false });
  }
  checks.realtime = ctx.slots.realtimeStatus?.() ?? { ok: ctx.config.gateway.enabled, detail: ctx.config.gateway.enabled ? "accepting" : "gateway disabled" };
  const ready = Object.values(checks).every((c) => c.ok);
  return { status: ready ? "ready" : "not_ready", checks };
}

async function projectionLag(ctx: ServiceContext, p: Projection<any>): Promise<Check> {
  try {
    const row = await ctx.db.selectFrom("projection_offsets").select("last_seq").where("name", "=", p.name).executeTakeFirst();
    const applied = row ? Number(row.last_seq) : 0;
    const last = await timeout(ctx.nats.jsm.streams.getMessage(p.stream, { last_by_subj: p.filterSubject }), 1000).catch(() => null);
    const head = last?.seq ?? 0;
    // The first unapplied event of its subjects, for its stream time (a direct get).
    const next = applied < head ? await timeout(ctx.nats.jsm.direct.getMessage(p.stream, { seq: applied + 1, next_by_subj: p.filterSubject }), 1000).catch(() => null) : null;
    return judgeProjectionLag({
      applied,
      head,
      oldestUnappliedAt: next ? next.time.getTime() : undefined,
      now: Date.now(),
      maxLagMs: ctx.config.readiness.projectionMaxLagMs,
      policy: p.lagPolicy ?? "bounded",
    });
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
