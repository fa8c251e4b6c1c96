import type { ChildProcess } from "node:child_process";
import type { Logger } from "./logger";

/** Exit code of a process that stopped on a fatal error (EX_SOFTWARE). */
export const FATAL_EXIT_CODE = 70;
/** Exit code of a requested stop that did not finish within its bound (work was left pending). */
export const STOP_TIMED_OUT_EXIT_CODE = 1;

export interface ProcessGuardOptions {
  logger: Logger;
  /** Stops the services; bounded by `stopTimeoutMs`. */
  stop(): Promise<void>;
  /** SHUTDOWN_TIMEOUT_MS: how long a stop may take before the process exits anyway. */
  stopTimeoutMs?: number;
  /**
   * Also stop on SIGINT, SIGTERM and, for a child of `stt supervise`, its stop message
   * or the IPC channel closing (the supervisor is gone): exit 0 when the stop finished
   * in time, STOP_TIMED_OUT_EXIT_CODE when the deadline cut it short. A second signal
   * while stopping exits at once (the supervisor's message and its loss are no signal:
   * a terminal's Ctrl-C reaches the child and, through the supervisor, its message).
   */
  stopOnSignals?: boolean;
  /**
   * The bound of the stop when the supervisor is gone (killed outright): the listeners
   * close first, at once, and the process exits by this deadline whatever is pending,
   * so an orphan neither answers on the port nor lingers (default 300 ms).
   */
  orphanStopTimeoutMs?: number;
  /** Ends the process (process.exit outside tests of the guard itself). */
  exit?: (code: number) => void;
}

/**
 * Resolves true when `work` settled within `ms`, false when the deadline came first
 * (`work` is then abandoned, not cancelled). The deadline timer is not unref'd: with
 * the work stuck on nothing that keeps the event loop alive, the process would
 * otherwise end on its own with code 0 instead of reporting the timeout.
 */
export async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([work.then(() => true, () => true), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The last line of defence of `stt serve`, and the owner of its exit.
 *
 * Fatal errors: request, message and socket handlers catch their own errors (the HTTP
 * bridge, hono's onError, the consumer wrapper, the WebSocket handlers), so what
 * arrives here escaped all of them: an exception thrown from a callback nobody guards,
 * or a rejected promise nobody awaited. The process state is then unknown, so it is
 * not kept half-alive: the error is logged with its stack, the services are stopped
 * (bounded), and the process exits with FATAL_EXIT_CODE for its supervisor
 * (`stt supervise`, or the orchestrator) to start a fresh one.
 *
 * Stop requests (`stopOnSignals`): the same bounded stop. Every step of a stop can
 * hang while NATS or Postgres is unreachable (a flush, a drain, closing a pool), and a
 * process that never exits keeps its port and its consumers: after
 * `stopTimeoutMs` the process exits with whatever is still pending.
 *
 * Returns a function that removes the guard.
 */
export function installProcessGuard(options: ProcessGuardOptions): () => void {
  const { logger } = options;
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const timeoutMs = options.stopTimeoutMs ?? 10_000;
  const orphanTimeoutMs = Math.min(timeoutMs, options.orphanStopTimeoutMs ?? 300);
  let stopping = false;
  const stopThenExit = (code: number, boundMs = timeoutMs) => {
    stopping = true;
    void settlesWithin(options.stop(), boundMs).then((inTime) => {
      if (inTime) return exit(code);
      logger.warn("stop did not finish within SHUTDOWN_TIMEOUT_MS: exiting with work still pending", { timeout_ms: timeoutMs });
      exit(code === 0 ? STOP_TIMED_OUT_EXIT_CODE : code);
    });
  };
  const onFatal = (kind: string) => (err: unknown) => {
    const e = err instanceof Error ? err : new Error(String(err));
    logger.error("fatal error: stopping for a restart", { kind, error: e.message, stack: e.stack, exit_code: FATAL_EXIT_CODE });
    if (stopping) return; // while stopping: the first decision stands
    stopThenExit(FATAL_EXIT_CODE);
  };
  // OS signals received: a second one is an impatient operator's second Ctrl-C; the
  // supervisor's message and its loss are no signal (a terminal's one Ctrl-C reaches the
  // child directly and through the supervisor's message)
  let signals = 0;
  const onRequest = (reason: string) => () => {
    const isSignal = reason !== "supervisor gone" && reason !== "supervisor stop";
    if (isSignal) signals++;
    if (stopping) {
      if (isSignal && signals >= 2) {
        logger.warn("second stop request while stopping: exiting now", { signal: reason });
        exit(STOP_TIMED_OUT_EXIT_CODE);
      } else if (reason === "supervisor gone") {
        // lost while stopping: the orphan's bound from now on
        setTimeout(() => exit(STOP_TIMED_OUT_EXIT_CODE), orphanTimeoutMs);
      }
      return;
    }
    const bound = reason === "supervisor gone" ? orphanTimeoutMs : timeoutMs;
    logger.info("shutting down", { signal: reason, timeout_ms: bound });
    stopThenExit(0, bound);
  };
  const onException = onFatal("uncaught_exception");
  const onRejection = onFatal("unhandled_rejection");
  const onSigint = onRequest("SIGINT");
  const onSigterm = onRequest("SIGTERM");
  // Under `stt supervise`: a supervisor that died (even by SIGKILL) leaves no orphan
  // holding the port. The channel closes when the supervisor's end does.
  const onDisconnect = onRequest("supervisor gone");
  const onSupervisorStop = onRequest("supervisor stop");
  const onMessage = (message: unknown) => {
    if ((message as { stt?: unknown } | null)?.stt === "stop") onSupervisorStop();
  };
  process.on("uncaughtException", onException);
  process.on("unhandledRejection", onRejection);
  if (options.stopOnSignals) {
    process.on("SIGINT", onSigint);
    process.on("SIGTERM", onSigterm);
    process.on("disconnect", onDisconnect);
    process.on("message", onMessage);
    // started with an IPC channel that closed before we listened: the supervisor is gone
    if (typeof process.send === "function" && !process.connected) onDisconnect();
  }
  return () => {
    process.off("uncaughtException", onException);
    process.off("unhandledRejection", onRejection);
    process.off("SIGINT", onSigint);
    process.off("SIGTERM", onSigterm);
    process.off("disconnect", onDisconnect);
    process.off("message", onMessage);
  };
}

/** Helper processes (the engines' ps-workers) SIGKILLed when this process exits: one exit listener for all. */
const helpers = new Set<ChildProcess>();
const killHelpers = () => {
  for (const child of helpers) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
};

/**
 * Ends `child` with this process: whatever way it exits (a bounded stop cut short, a
 * supervisor gone), the helper does not outlive it, reading a pipe nobody writes. A
 * SIGKILL of the process group ends both; of this process alone, the helper exits on
 * its stdin's end.
 */
export function killWithUs(child: ChildProcess): void {
  if (helpers.size === 0) process.on("exit", killHelpers);
  helpers.add(child);
  child.once("exit", () => {
    helpers.delete(child);
    if (helpers.size === 0) process.off("exit", killHelpers);
  });
}
