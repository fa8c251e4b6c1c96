/**
 * A jobs-transcriber replica in its own process, for the hard-kill fault test: it is
 * configured entirely from the environment the test passes (same NATS prefix, Postgres
 * schema and object-store directory as the test's stack) and runs until killed.
 */
import { loadConfig } from "../../shared/config";
import { createLogger } from "../../shared/logger";
import { startRuntime } from "../../services/stt/runtime";

const config = loadConfig(process.env, { STT_SERVICES: "jobs-transcriber" });
await startRuntime(config, createLogger(config.logLevel, { child: "jobs-transcriber" }));
process.stdout.write("ready\n");
