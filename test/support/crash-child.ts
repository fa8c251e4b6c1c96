import { appendFileSync } from "node:fs";
import { createLogger } from "../../shared/logger";
import { installProcessGuard } from "../../shared/process-guard";

/**
 * A process with the real guard of `stt serve` that fails the way argv[2] says, for
 * test/process-guard.test.ts: `rejection` (a promise nobody awaits), `exception` (a
 * throw from a timer callback), `uws-warning` (prints uWS's per-upgrade warning and
 * another line, exits 0), `ok` (exits 0), `wait` (runs until SIGINT/SIGTERM stops it),
 * `stop-hangs` (the same, with a stop that never finishes). Each run appends a line to argv[3], so
 * the test counts how often a supervisor started it.
 */
const [how = "ok", runs] = process.argv.slice(2);
if (runs) appendFileSync(runs, `${process.pid}\n`);
installProcessGuard({
  logger: createLogger("info", { svc: "crash-child" }),
  stop: async () => {
    // `stop-hangs`: a stop that never finishes (a flush waiting for an unreachable NATS)
    if (how === "stop-hangs") return new Promise<void>(() => process.stderr.write("stop started\n"));
    process.stderr.write("stopped cleanly\n");
  },
  stopTimeoutMs: Number(process.env.SHUTDOWN_TIMEOUT_MS ?? 10_000),
  stopOnSignals: how === "stop-hangs" || how === "wait",
});
if (how === "stop-hangs" || how === "wait") process.stderr.write("ready\n");
setTimeout(() => {
  if (how === "rejection") void Promise.reject(new Error("nobody awaited this"));
  else if (how === "exception") throw new Error("thrown from a timer");
  else if (how === "uws-warning") {
    // what uWS.js prints natively per upgrade, then an ordinary line
    process.stderr.write("Warning: uWS.HttpResponse writes must be made from within a corked callback. See documentation for uWS.HttpResponse.cork and consult the user manual.\n");
    process.stderr.write("an ordinary line\n");
    process.exit(0);
  }
  else if (how === "ok") process.exit(0);
  // `wait`, `stop-hangs`: run until a signal stops the process
}, 50);
setTimeout(() => undefined, how === "stop-hangs" || how === "wait" ? 60_000 : 10_000);
