import { loadConfig, ConfigError, readEmbeddedDefaultsSet } from "../../shared/config";
import { PortInUseError } from "../../shared/listen";
import { createDb, migrateToLatest } from "../../shared/db/index";
import { createLogger } from "../../shared/logger";
import { connectNats } from "../../shared/nats";
import { rebuildProjection } from "../../shared/projection";
import { allProjections } from "../projector/projections";
import { embeddedSecrets, startEmbedded } from "./embedded";
import { startRuntime } from "./runtime";
import { startTelemetry, stopTelemetry } from "../../shared/telemetry";
import { installProcessGuard, settlesWithin } from "../../shared/process-guard";
import { supervise } from "./supervise";
import { layoutChildren, layoutFor, selectServices } from "./layout";
import { serviceDefs } from "./services";
import { availableParallelism } from "node:os";

/**
 * `stt` — the one CLI.
 *   stt serve              run the services of STT_SERVICES (default: all, one process)
 *   stt supervise [-- cmd] run the services as `stt serve` processes (STT_LAYOUT), or cmd,
 *                          and restart each one that crashes
 *   stt migrate            declare the JetStream streams and run the Postgres migrations
 *   stt rebuild <name|all> drop a read model and rebuild it from the log
 */
const usage = "usage: stt serve | stt supervise [-- command…] | stt migrate | stt rebuild <projection|all>";

async function main(argv: string[]): Promise<number> {
  const [command = "serve", arg] = argv;
  // Parsed once before the embedded processes start (fail fast, and their data dir),
  // then again with the addresses and secrets they provide.
  const boot = loadConfig();
  const bootLogger = createLogger(boot.logLevel, { svc: "stt" });
  // `stt serve`: from here on the guard owns the exit: a fatal error, SIGINT/SIGTERM or a
  // lost supervisor runs stopAll (what has started so far), bounded by
  // SHUTDOWN_TIMEOUT_MS. Installed before anything starts, so a stop requested while
  // NATS or Postgres is still being reached is not lost.
  let stopAll = async () => {};
  if (command === "serve") installProcessGuard({ logger: bootLogger, stop: () => stopAll(), stopTimeoutMs: boot.shutdown.timeoutMs, stopOnSignals: true });
  // `stt supervise`'s groups of services, checked before anything starts
  const cores = availableParallelism();
  const groups = command === "supervise" && arg !== "--" ? layoutFor(cores, boot.supervise.layout, selectServices(boot.services, serviceDefs.map((d) => d.name))) : undefined;
  // `stt serve` alone, or `stt supervise` for all its children (which then find
  // NATS_URL, DATABASE_URL and the secrets set, so they start and generate nothing)
  const resolvesDefaults = command === "serve" || groups !== undefined;
  const set = readEmbeddedDefaultsSet();
  const embedded = resolvesDefaults ? await startEmbedded(set, boot.dataDir, bootLogger) : undefined;
  const secrets = resolvesDefaults ? embeddedSecrets(set, boot.dataDir, bootLogger) : {};
  const config = loadConfig(undefined, {
    ...secrets,
    NATS_URL: embedded?.natsUrl ?? set.NATS_URL,
    DATABASE_URL: embedded?.databaseUrl ?? set.DATABASE_URL,
  });
  const logger = createLogger(config.logLevel, { svc: "stt" });

  switch (command) {
    case "serve": {
      stopAll = async () => {
        await embedded?.stop();
      };
      await startTelemetry(config.telemetry);
      const runtime = await startRuntime(config, logger).catch(async (err) => {
        // a start-up error (a taken port, NATS refusing): the embedded servers go too
        await settlesWithin(stopAll(), config.shutdown.timeoutMs);
        throw err;
      });
      stopAll = async () => {
        await runtime.stop();
        await embedded?.stop();
        await stopTelemetry();
      };
      const { port, metricsPort } = runtime.ctx.slots;
      logger.info("stt is up", { services: [...runtime.ctx.running], ...(port === undefined ? {} : { port, base_url: `http://127.0.0.1:${port}` }), metrics_port: metricsPort, pid: process.pid });
      // runs until the guard stops the process
      return new Promise<number>(() => undefined);
    }
    case "supervise": {
      const backoff = { logger: bootLogger, initialDelayMs: boot.supervise.initialDelayMs, maxCrashes: boot.supervise.maxCrashes };
      if (!groups) {
        const command = argv.slice(2);
        if (command.length === 0) {
          process.stderr.write(`${usage}\n`);
          return 2;
        }
        return supervise({ ...backoff, children: [{ name: command.join(" "), command }] });
      }
      // Resolved once here and handed to every child: the addresses of NATS and Postgres
      // (the embedded ones started above) and the secrets, so the children agree by
      // construction; the rest of the environment they inherit as it is.
      const shared = { NATS_URL: config.nats.url, DATABASE_URL: config.db.url, ...secrets };
      const children = layoutChildren(groups, shared, config.http.metricsPort);
      bootLogger.info("stt supervise: starting", { layout: config.supervise.layout, cores, groups: children.map((c) => c.name) });
      const serve = [process.execPath, ...process.execArgv, process.argv[1]!, "serve"];
      try {
        return await supervise({ ...backoff, children: children.map((c) => ({ ...c, command: serve, stopsOnMessage: true })) });
      } finally {
        await embedded?.stop();
      }
    }
    case "migrate": {
      const nats = await connectNats({ url: config.nats.url, prefix: config.nats.prefix, replicas: config.nats.replicas });
      const db = createDb(config.db);
      await migrateToLatest(db, config.db.schema);
      await nats.close();
      await db.destroy();
      logger.info("migrated");
      return 0;
    }
    case "rebuild": {
      const nats = await connectNats({ url: config.nats.url, prefix: config.nats.prefix, replicas: config.nats.replicas });
      const db = createDb(config.db);
      await migrateToLatest(db, config.db.schema);
      const all = allProjections(nats.topology, config);
      const chosen = arg === "all" ? all : all.filter((p) => p.name === arg);
      if (!arg || chosen.length === 0) {
        process.stderr.write(`${usage}\nprojections: ${all.map((p) => p.name).join(", ")}\n`);
        await nats.close();
        await db.destroy();
        return 2;
      }
      for (const p of chosen) {
        const result = await rebuildProjection(nats, db, p, logger);
        logger.info("rebuilt", { projection: p.name, events: result.applied, dead_lettered: result.deadLettered, last_seq: result.lastSeq });
      }
      await nats.close();
      await db.destroy();
      return 0;
    }
    default:
      process.stderr.write(`${usage}\n`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof ConfigError || err instanceof PortInUseError) process.stderr.write(`${err.message}\n`);
    else process.stderr.write(`stt failed: ${(err as Error)?.stack ?? err}\n`);
    process.exit(1);
  },
);
