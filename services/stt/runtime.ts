import { createKeyStore } from "../../domain/keys/store";
import { createUsageStore } from "../../domain/usage/store";
import { createSessionStore } from "../../domain/sessions/store";
import { createJobStore } from "../../domain/jobs/store";
import type { Config } from "../../shared/config";
import { createDb, migrateToLatest } from "../../shared/db/index";
import { createLogger, type Logger } from "../../shared/logger";
import { connectNats } from "../../shared/nats";
import { installNatsPatches } from "../../shared/nats-patches";
import { createObjectStore } from "../../shared/objects/index";
import { createWorkerRouter } from "../../shared/workers/router";
import type { RunningService, ServiceContext } from "../context";
import { allProjections } from "../projector/projections";
import { serviceDefs } from "./services";
import { selectServices } from "./layout";
import { registerRuntimeMetrics } from "./runtime-metrics";
import { serveMetrics } from "../../shared/metrics";
import type { Server } from "node:http";
import { settlesWithin } from "../../shared/process-guard";

/** The services that accept connections: stopped first. */
const LISTENERS = new Set(["realtime-gateway", "http-gateway"]);

/**
 * Builds the adapters (NATS with its topology, Postgres with migrations, the object
 * store) and starts the selected services in order. Used by `stt serve` and by the
 * test stack, so tests run exactly what production runs.
 */
export interface Runtime {
  ctx: ServiceContext;
  services: RunningService[];
  stop(): Promise<void>;
}

export async function startRuntime(config: Config, logger: Logger = createLogger(config.logLevel)): Promise<Runtime> {
  const wanted = selectServices(config.services, serviceDefs.map((s) => s.name));

  const nats = await connectNats({ url: config.nats.url, prefix: config.nats.prefix, replicas: config.nats.replicas, name: `stt:${wanted.join(",")}` });
  // connectNats installed them; which took (also stt_nats_patch_active)
  const patches = installNatsPatches();
  if (Object.values(patches).every(Boolean)) logger.info("nats.js patches active", patches);
  else logger.warn("nats.js patches left out: the internals they need were not found (a nats.js other than the pinned version?)", patches);
  const db = createDb(config.db);
  await migrateToLatest(db, config.db.schema);
  const objects = await createObjectStore(config.objects);
  const ctx: ServiceContext = {
    config,
    nats,
    // one store per aggregate, built once and handed to every service
    sessions: createSessionStore(nats),
    db,
    objects,
    jobs: createJobStore(nats),
    logger,
    now: () => new Date(),
    keys: createKeyStore({ nats, logger: logger.child({ component: "key-store" }) }),
    usage: createUsageStore({ nats, db, windowSeconds: config.usage.windowSeconds }),
    projections: allProjections(nats.topology, config),
    running: new Set(wanted),
    slots: {},
  };
  // Every process gets the worker router (segment, batch and realtime planes call it);
  // it only watches the registry bucket, so it is cheap where unused.
  const router = await createWorkerRouter({
    nats,
    budgetMs: config.workers.attemptTimeoutMs,
    fallback: config.workers.fallback,
    staleMs: 3 * config.workers.heartbeatMs + 1000,
    logger: logger.child({ component: "worker-router" }),
  });
  ctx.router = router;
  const services: RunningService[] = [];
  const unregisterMetrics = registerRuntimeMetrics(ctx);
  let metricsServer: Server | undefined;
  // Stop accepting first: the listeners (the realtime gateway closes its socket and its
  // sessions, the HTTP gateway its server, the metrics port), so nothing new arrives
  // while the rest drains; then the other services in reverse start order, then the
  // adapters. Not bounded here: `stt serve`'s process guard exits after
  // SHUTDOWN_TIMEOUT_MS with whatever is still pending (a flush or drain waiting for an
  // unreachable NATS or Postgres).
  const stop = async () => {
    unregisterMetrics();
    const metricsClosed = new Promise((r) => (metricsServer ? metricsServer.close(r) : r(undefined)));
    const reversed = [...services].reverse();
    const listenersFirst = [...reversed.filter((s) => LISTENERS.has(s.name)), ...reversed.filter((s) => !LISTENERS.has(s.name))];
    for (const s of listenersFirst) {
      await s.stop().catch((err) => logger.warn("service did not stop cleanly", { service: s.name, error: String(err) }));
    }
    await metricsClosed;
    await router.stop();
    await nats.close();
    await objects.close();
    await db.destroy();
  };
  try {
    for (const def of serviceDefs) {
      if (!ctx.running.has(def.name)) continue;
      services.push(await def.start(ctx));
      logger.debug("service started", { service: def.name });
    }
  } catch (err) {
    // bounded: the start may have failed because NATS or Postgres went away
    await settlesWithin(stop(), config.shutdown.timeoutMs);
    throw err;
  }
  // no HTTP gateway here to serve /metrics: it gets its own port (a taken port is not fatal)
  if (!ctx.running.has("http-gateway")) {
    metricsServer = await serveMetrics(config.http.metricsPort, config.http.host).catch((err) => {
      logger.warn("metrics port not served", { port: config.http.metricsPort, error: (err as Error).message });
      return undefined;
    });
    const address = metricsServer?.address();
    if (address && typeof address === "object") ctx.slots.metricsPort = address.port;
  }
  return { ctx, services, stop };
}
