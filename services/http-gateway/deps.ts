import type { Diarizer } from "../../domain/diarization/diarize";
import type { KeyCache } from "../../domain/keys/key-cache";
import type { KeyStore } from "../../domain/keys/store";
import type { SegmentBudgets } from "../../domain/usage/budget";
import type { UsageStore } from "../../domain/usage/store";
import type { JobStore } from "../../domain/jobs/store";
import type { Readiness } from "../../schemas/http";
import type { Config } from "../../shared/config";
import type { Db } from "../../shared/db/index";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import type { RequestLimiter } from "../../shared/rate-limit";
import type { WorkerRouter } from "../../shared/workers/types";
import type { ObjectStore } from "../../shared/objects/index";

/** What the HTTP gateway needs, built by the composition root (services/stt). */
export interface GatewayDeps {
  config: Config;
  nats: Nats;
  db: Db;
  logger: Logger;
  now: () => Date;
  /** Worker router for the segment plane (absent when no workers are configured). */
  router?: WorkerRouter;
  /** The job aggregate's store (submit, cancel, a poll before the projection caught up). */
  jobs: JobStore;
  /** Object store for job artifacts. */
  objects?: ObjectStore;
  readiness: () => Promise<Readiness>;
  /** API keys in memory, kept current from the key stream; throttles failed authentication. */
  keyCache: KeyCache;
  /** The key stream's one writer. */
  keys: KeyStore;
  /** The usage stream's one writer and the live audio budget. */
  usage: UsageStore;
  /** maxRequestsPerMinute counted in blocks per process (absent: one compare-and-set per request). */
  limiter?: RequestLimiter;
  /** The segment plane's audio budget drawn in blocks per process (absent: the counter on every request). */
  budgets?: SegmentBudgets;
  /** Who spoke when, for `diarize` (absent: the embedded diarizer; docs/diarization.md "Replacing the diarizer"). */
  diarizer?: Diarizer;
}
