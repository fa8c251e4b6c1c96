/**
 * How often the idle-job sweep (process-manager.ts) looks at a job again when advancing
 * it decided nothing: such a job is not a lost decision, and reading it afresh from the
 * stream leader (its whole subject) every sweep would cost the cluster for nothing.
 * After each fruitless look the wait doubles, from `baseMs` up to `maxMs`; a look that
 * decides something, or the job leaving the sweep's findings, starts it afresh.
 */
export interface SweepBackoff {
  /** Whether `id` may be looked at now. */
  due(id: string, now: number): boolean;
  /** What looking at `id` at `now` gave: events decided or not. */
  looked(id: string, decided: boolean, now: number): void;
  /** Forgets every job not in `found` (it moved on, or ended). */
  keepOnly(found: Iterable<string>): void;
}

export function createSweepBackoff(baseMs: number, maxMs: number): SweepBackoff {
  const waits = new Map<string, { misses: number; until: number }>();
  return {
    due: (id, now) => (waits.get(id)?.until ?? 0) <= now,
    looked(id, decided, now) {
      if (decided) return void waits.delete(id);
      const misses = (waits.get(id)?.misses ?? 0) + 1;
      waits.set(id, { misses, until: now + Math.min(maxMs, baseMs * 2 ** misses) });
    },
    keepOnly(found) {
      const keep = new Set(found);
      for (const id of waits.keys()) if (!keep.has(id)) waits.delete(id);
    },
  };
}
