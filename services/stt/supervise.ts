import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import type { Logger } from "../../shared/logger";

/**
 * What uWS.js 20.30's native code prints on stderr for every WebSocket upgrade: the
 * gateway upgrades outside `res.cork` on purpose (docs/realtime.md: corking it drops
 * other sockets), so the line says nothing an operator must act on.
 */
const UWS_CORK_WARNING = /^Warning: uWS\.HttpResponse writes must be made from within a corked callback/;

export interface SuperviseOptions {
  /** The command to keep running: argv[0] and its arguments. */
  command: string[];
  logger: Logger;
  /** First restart delay; doubles per crash up to maxDelayMs, reset after a healthy run. */
  initialDelayMs?: number;
  maxDelayMs?: number;
  /** A run that lasted this long counts as healthy (resets the delay and the crash count). */
  healthyAfterMs?: number;
  /** Give up (exit non-zero) after this many crashes in a row. */
  maxCrashes?: number;
}

/**
 * `stt supervise`: runs `stt serve` as a child and starts a fresh one whenever it
 * exits on its own with a non-zero code or a signal (a fatal error, a native crash,
 * the kernel's OOM killer), with exponential backoff. A child that ends with code 0
 * (it was told to stop) ends the supervisor too. SIGINT and SIGTERM are passed to the
 * child, and the supervisor exits once it has stopped. After `maxCrashes` crashes in
 * a row without a healthy run in between it gives up with the child's code, so an
 * orchestrator above it sees the failure instead of a restart loop.
 *
 * For a machine without an orchestrator (`scripts/start.sh`); under systemd, Docker or
 * Kubernetes run `stt serve` directly and let their restart policy do this.
 *
 * The child's stderr passes through line by line, except uWS's native per-upgrade cork
 * warning, which goes to the log at debug level.
 */
export async function supervise(options: SuperviseOptions): Promise<number> {
  const { logger } = options;
  const initialDelay = options.initialDelayMs ?? 1000;
  const maxDelay = options.maxDelayMs ?? 30_000;
  const healthyAfter = options.healthyAfterMs ?? 60_000;
  const maxCrashes = options.maxCrashes ?? 10;
  let stopping = false;
  let current: ReturnType<typeof spawn> | undefined;
  const forward = (signal: NodeJS.Signals) => {
    stopping = true;
    current?.kill(signal);
  };
  process.on("SIGINT", forward);
  process.on("SIGTERM", forward);
  let crashes = 0;
  let delay = initialDelay;
  try {
    for (;;) {
      const started = Date.now();
      const [cmd, ...args] = options.command;
      // Its own process group, so a terminal's Ctrl-C reaches the child once (through
      // us), and an IPC channel, so the child stops itself if the supervisor dies.
      // stderr through us: the native per-upgrade uWS warning goes to the log at debug
      // level, every other line to our stderr unchanged
      current = spawn(cmd!, args, { stdio: ["inherit", "inherit", "pipe", "ipc"], detached: true });
      createInterface({ input: current.stderr!, crlfDelay: Infinity }).on("line", (line) => {
        if (UWS_CORK_WARNING.test(line)) logger.debug("uWS upgrade outside a corked callback (deliberate, harmless; docs/realtime.md)");
        else process.stderr.write(`${line}\n`);
      });
      const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
        current!.once("error", (err) => {
          logger.error("supervised process could not start", { error: err.message });
          resolve({ code: 127, signal: null });
        });
        current!.once("exit", (c, s) => resolve({ code: c, signal: s }));
      });
      if (stopping || code === 0) return code ?? 0;
      const ranMs = Date.now() - started;
      if (ranMs >= healthyAfter) {
        crashes = 0;
        delay = initialDelay;
      }
      crashes++;
      const exitCode = code ?? 1;
      if (crashes >= maxCrashes) {
        logger.error("supervised process keeps crashing: giving up", { crashes, code, signal });
        return exitCode;
      }
      logger.warn("supervised process exited: restarting", { code, signal, ran_ms: ranMs, restart_in_ms: delay, crashes });
      await new Promise((r) => setTimeout(r, delay));
      if (stopping) return exitCode;
      delay = Math.min(delay * 2, maxDelay);
    }
  } finally {
    process.off("SIGINT", forward);
    process.off("SIGTERM", forward);
  }
}
