import type { Logger } from "./logger";

/** Exit code of a process that stopped on a fatal error (EX_SOFTWARE). */
export const FATAL_EXIT_CODE = 70;

export interface ProcessGuardOptions {
  logger: Logger;
  /** Stops the services; bounded by `stopTimeoutMs`. */
  stop(): Promise<void>;
  stopTimeoutMs?: number;
  /** Ends the process (process.exit outside tests of the guard itself). */
  exit?: (code: number) => void;
}

/**
 * The last line of defence of `stt serve`. Request, message and socket handlers catch
 * their own errors (the HTTP bridge, hono's onError, the consumer wrapper, the
 * WebSocket handlers), so what arrives here escaped all of them: an exception thrown
 * from a callback nobody guards, or a rejected promise nobody awaited. The process
 * state is then unknown, so it is not kept half-alive: the error is logged with its
 * stack, the services are stopped (bounded), and the process exits with
 * FATAL_EXIT_CODE for its supervisor (`stt supervise`, or the orchestrator) to start a
 * fresh one. Returns a function that removes the guard.
 */
export function installProcessGuard(options: ProcessGuardOptions): () => void {
  const { logger } = options;
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let fatal = false;
  const onFatal = (kind: string) => (err: unknown) => {
    const e = err instanceof Error ? err : new Error(String(err));
    logger.error("fatal error: stopping for a restart", { kind, error: e.message, stack: e.stack, exit_code: FATAL_EXIT_CODE });
    if (fatal) return; // a second one while stopping: the first already decided
    fatal = true;
    const timeout = new Promise<void>((resolve) => setTimeout(resolve, options.stopTimeoutMs ?? 10_000).unref());
    void Promise.race([options.stop().catch(() => undefined), timeout]).finally(() => exit(FATAL_EXIT_CODE));
  };
  const onException = onFatal("uncaught_exception");
  const onRejection = onFatal("unhandled_rejection");
  process.on("uncaughtException", onException);
  process.on("unhandledRejection", onRejection);
  return () => {
    process.off("uncaughtException", onException);
    process.off("unhandledRejection", onRejection);
  };
}
