import type { KeyCache } from "../domain/keys/key-cache";
import type { KeyStore } from "../domain/keys/store";
import type { UsageStore } from "../domain/usage/store";
import type { Config } from "../shared/config";
import type { Db } from "../shared/db/index";
import type { SessionStore } from "../domain/sessions/store";
import type { JobStore } from "../domain/jobs/store";
import type { Logger } from "../shared/logger";
import type { Nats } from "../shared/nats";
import type { ObjectStore } from "../shared/objects/index";
import type { Projection, RunningProjection } from "../shared/projection";
import type { WorkerRouter } from "../shared/workers/types";

/**
 * What every service gets from the composition root. Services never import each
 * other; when two must meet in one process (the HTTP app handed to the realtime
 * gateway's one-port listener, projection progress for /readyz) they meet here.
 */
export interface ServiceContext {
  config: Config;
  nats: Nats;
  /** The only writer of rt.evt (lifecycle, VAD decisions, partials, finals, outcomes). */
  sessions: SessionStore;
  db: Db;
  objects: ObjectStore;
  router?: WorkerRouter;
  /**
   * The job aggregate's store, the only writer of `job.evt`: one per process, so its
   * cache of folded states is shared by every job service running here.
   */
  jobs: JobStore;
  logger: Logger;
  now: () => Date;
  /** The key stream's one writer (issue, revoke, key use). */
  keys: KeyStore;
  /** The usage stream's one writer, and the live audio budget. */
  usage: UsageStore;
  /** Every read model of the service (for /readyz and `stt rebuild`). */
  projections: Projection<any>[];
  /** Names of the services running in this process. */
  running: Set<string>;
  /** Shared slots filled by services as they start. */
  slots: {
    /** The hono app's fetch handler, when http-gateway runs in this process. */
    httpFetch?: (request: Request, env: { remoteAddress: string }) => Response | Promise<Response>;
    /** Live projection runners, when the projector runs in this process. */
    projections?: RunningProjection[];
    /** Port actually bound by the listener (PORT=0 picks one). */
    port?: number;
    /** Port of /metrics when this process runs no http-gateway (METRICS_PORT). */
    metricsPort?: number;
    /** The key cache and revocation feed, when http-gateway runs in this process. */
    keyCache?: KeyCache;
    /** Whether the realtime gateway in this process would admit an upgrade now. */
    realtimeStatus?: () => { ok: boolean; detail: string };
  };
}

export interface RunningService {
  name: string;
  stop(): Promise<void>;
}

export interface ServiceDef {
  name: string;
  start(ctx: ServiceContext): Promise<RunningService>;
}
