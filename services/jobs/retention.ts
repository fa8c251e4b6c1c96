import { deleteJob, findEndedJobs } from "../../domain/jobs/queries";
import { artifactPrefix } from "../../schemas/jobs";
import type { Db } from "../../shared/db/index";
import type { Logger } from "../../shared/logger";
import type { ObjectStore } from "../../shared/objects/index";

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * The retention sweep: jobs that ended (complete, errored, terminated) more than
 * `retentionDays` ago lose their artifacts in object storage and their `jobs` read-model
 * row. The event log is not touched: JetStream ages job events out by itself (the JOBS
 * stream keeps 30 days), so a `stt rebuild jobs` within that time brings the row back
 * with its status and steps but no output (the poll answers 503 `result_unavailable`
 * for a complete job whose result.json was swept). Returns how many jobs were swept.
 *
 * Only the job's own files are deleted: the direct children of its artifact folder, so
 * a legacy job's flat `transcription/<request_id>/` folder never takes newer jobs'
 * per-job folders below it along.
 */
export async function sweepExpiredJobs(deps: { db: Db; objects: ObjectStore; logger: Logger }, now: Date, retentionDays: number, limit = 500): Promise<number> {
  if (retentionDays <= 0) return 0;
  const cutoff = new Date(now.getTime() - retentionDays * DAY_MS);
  const expired = await findEndedJobs(deps.db, cutoff, limit);
  for (const job of expired) {
    const prefix = artifactPrefix(job);
    const keys = await deps.objects.list(prefix);
    for (const key of keys) if (!key.slice(prefix.length).includes("/")) await deps.objects.delete(key);
    await deleteJob(deps.db, job.workflowId);
  }
  if (expired.length > 0) deps.logger.info("retention sweep removed jobs", { jobs: expired.length, cutoff: cutoff.toISOString() });
  return expired.length;
}

/** Runs the sweep every `everyMs` (and once at start); a failed sweep is retried next time. */
export function startRetentionSweep(deps: { db: Db; objects: ObjectStore; logger: Logger; now: () => Date }, retentionDays: number, everyMs: number): { stop(): void } {
  if (retentionDays <= 0) return { stop: () => undefined };
  const run = () =>
    void sweepExpiredJobs(deps, deps.now(), retentionDays).catch((err) => deps.logger.warn("retention sweep failed; retrying next time", { error: String((err as Error)?.message ?? err) }));
  const first = setTimeout(run, 5_000);
  const timer = setInterval(run, everyMs);
  first.unref();
  timer.unref();
  return {
    stop: () => {
      clearTimeout(first);
      clearInterval(timer);
    },
  };
}
