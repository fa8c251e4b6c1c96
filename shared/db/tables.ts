import type { JobError, JobStatus, JobStepView } from "../../schemas/jobs";
import type { LimitOverrides } from "../../schemas/plans";
import type { ColumnType } from "kysely";

/**
 * Postgres read-model tables (snake_case). Projections own the rows; JetStream is the
 * source of truth, so any table here can be dropped and rebuilt by replay.
 */
interface ProjectionOffsetsTable {
  name: string;
  last_seq: ColumnType<string | number, string | number, string | number>;
  updated_at: ColumnType<Date, Date | string, Date | string>;
}

export interface ApiKeysTable {
  id: string;
  owner_id: string;
  key_hash: string;
  key_prefix: string;
  last_four: string;
  plan: string;
  label: string | null;
  expires_at: ColumnType<Date | null, Date | string | null, Date | string | null>;
  revoked_at: ColumnType<Date | null, Date | string | null, Date | string | null>;
  last_used_at: ColumnType<Date | null, Date | string | null, Date | string | null>;
  created_at: ColumnType<Date, Date | string, Date | string>;
  /** The key's own overrides of its plan's limits (null: the plan's). */
  limit_overrides: ColumnType<LimitOverrides | null, string | null | undefined, string | null>;
}

interface UsageWindowsTable {
  key_id: string;
  owner_id: string;
  window_start: ColumnType<Date, Date | string, Date | string>;
  audio_seconds: ColumnType<number, number, number>;
  requests: ColumnType<string | number, string | number, string | number>;
  updated_at: ColumnType<Date, Date | string, Date | string>;
}

/**
 * The batch-jobs read model (migration 20261122_0200_jobs), written only by the jobs
 * projection (domain/jobs/projection.ts). jsonb columns are written as JSON text and
 * read back parsed.
 */
export interface JobsTable {
  workflow_id: string;
  request_id: string;
  owner_id: string;
  key_id: string;
  status: JobStatus;
  /** The poll view's `steps`. */
  steps: ColumnType<JobStepView[], string | undefined, string>;
  error: ColumnType<JobError | null, string | null | undefined, string | null>;
  review: ColumnType<boolean, boolean | undefined, boolean>;
  /**
   * The folded job aggregate. Its type (domain/jobs/decider.ts `ActiveJob`) is the
   * domain's, which shared/ does not import: domain/jobs/queries.ts names it on read.
   */
  state: ColumnType<unknown, string, string>;
  /** Stream sequence of the last event folded in. */
  last_seq: ColumnType<number, number | undefined, number>;
  created_at: ColumnType<Date, Date | string, Date | string>;
  updated_at: ColumnType<Date, Date | string, Date | string>;
}

/** An event a projection stepped over because it cannot be applied (shared/projection.ts). */
interface ProjectionDeadLettersTable {
  projection: string;
  /** Stream sequence of the event. */
  seq: ColumnType<string | number, string | number, string | number>;
  subject: string;
  /** SQLSTATE and message, or the parse error. */
  error: string;
  recorded_at: ColumnType<Date, Date | string | undefined, Date | string>;
}

export interface Database {
  projection_offsets: ProjectionOffsetsTable;
  projection_dead_letters: ProjectionDeadLettersTable;
  api_keys: ApiKeysTable;
  usage_windows: UsageWindowsTable;
  jobs: JobsTable;
}

;
