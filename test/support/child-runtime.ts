/**
 * The service runtime in its own OS process, configured entirely from the environment
 * the test passes (STT_SERVICES, the stack's NATS prefix, Postgres schema…), for tests
 * that stop, freeze or kill a process. Prints "ready" once started; runs until killed.
 */
import { loadConfig } from "../../shared/config";
import { createLogger } from "../../shared/logger";
import { startRuntime } from "../../services/stt/runtime";

const config = loadConfig(process.env);
await startRuntime(config, createLogger(config.logLevel, { child: process.env.STT_SERVICES ?? "all" }));
process.stdout.write("ready\n");
