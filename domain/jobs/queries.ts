import { sql, type Selectable } from "kysely";
import type { JobStatus } from "../../schemas/jobs";
import type { Db } from "../../shared/db/index";
import type { JobsTable } from "../../shared/db/tables";
import type { ActiveJob } from "./decider";

/**
 * Reads of the `jobs` read model (written by projection.ts), and the retention sweep's
 * delete. Every query takes the database first; every row comes back typed.
 */

/**
 * A `jobs` row. `state` is the aggregate the projection folded with the decider's own
 * `evolve` and wrote beside the row's other columns in one transaction; the projection
 * never writes a job that was not submitted, so it is always an `ActiveJob`.
 */
export type JobRow = Omit<Selectable<JobsTable>, "state"> & { state: ActiveJob };

/** The row of one job, or undefined (not submitted, not projected yet, or swept). */
export async function findJob(db: Db, workflowId: string): Promise<JobRow | undefined> {
  const row = await db.selectFrom("jobs").selectAll().where("workflow_id", "=", workflowId).executeTakeFirst();
  return row && { ...row, state: row.state as ActiveJob };
}

/**
 * Ids of queued or running jobs with no event since `before` (at most `limit`, in no set
 * order). With `idle`, only those with no step in flight (none running or retrying in the
 * read model): jobs the process manager should have moved on and has not, a decision lost
 * with a node.
 */
export async function findQuietJobs(db: Db, before: Date, limit: number, options: { idle?: boolean } = {}): Promise<string[]> {
  let query = db.selectFrom("jobs").select("workflow_id").where("status", "in", ["queued", "running"]).where("updated_at", "<", before);
  if (options.idle) {
    query = query.where(sql<boolean>`not exists (select 1 from jsonb_each(state->'steps') s where s.value->>'status' in ('running', 'retrying'))`);
  }
  const rows = await query.limit(limit).execute();
  return rows.map((r) => r.workflow_id);
}

/** Jobs that ended (complete, errored, terminated) before `cutoff`, oldest first. */
export async function findEndedJobs(db: Db, cutoff: Date, limit: number): Promise<{ workflowId: string; requestId: string }[]> {
  const rows = await db
    .selectFrom("jobs")
    .select(["workflow_id", "request_id"])
    .where("status", "in", ["complete", "errored", "terminated"])
    .where("updated_at", "<", cutoff)
    .orderBy("updated_at")
    .limit(limit)
    .execute();
  return rows.map((r) => ({ workflowId: r.workflow_id, requestId: r.request_id }));
}

/** Removes a job's row (the retention sweep; a `stt rebuild jobs` brings it back while its events last). */
export async function deleteJob(db: Db, workflowId: string): Promise<void> {
  await db.deleteFrom("jobs").where("workflow_id", "=", workflowId).execute();
}

/** How many jobs the read model holds in each status. */
export async function countJobsByStatus(db: Db): Promise<{ status: JobStatus; count: number }[]> {
  const rows = await db
    .selectFrom("jobs")
    .select(["status", sql<string>`count(*)`.as("n")])
    .groupBy("status")
    .execute();
  return rows.map((r) => ({ status: r.status, count: Number(r.n) }));
}
