import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { childEnvironment } from "../../shared/config";
import type { Logger } from "../../shared/logger";

/**
 * What uWS.js 20.30's native code prints on stderr for every WebSocket upgrade: the
 * gateway upgrades outside `res.cork` on purpose (docs/realtime.md: corking it drops
 * other sockets), so the line says nothing an operator must act on.
 */
const UWS_CORK_WARNING = /^Warning: uWS\.HttpResponse writes must be made from within a corked callback/;

/** One process to keep running. */
interface SupervisedChild {
  /** For the supervisor's own log lines (a layout's group: its services, comma-separated). */
  name: string;
  /** argv[0] and its arguments. */
  command: string[];
  /** Added to the supervisor's environment. */
  env?: Record<string, string>;
  /**
   * A `stt serve`: takes a stop request as the IPC message STOP_MESSAGE (its process
   * guard) rather than a signal, so a terminal's Ctrl-C, which reaches the whole process
   * group, still counts once. Other commands get the signal.
   */
  stopsOnMessage?: boolean;
}

/** The IPC message with which `stt supervise` asks a `stt serve` child to stop (shared/process-guard.ts). */
const STOP_MESSAGE = { stt: "stop" } as const;

export interface SuperviseOptions {
  children: SupervisedChild[];
  logger: Logger;
  /** First restart delay; doubles per crash up to maxDelayMs, reset after a healthy run. */
  initialDelayMs?: number;
  maxDelayMs?: number;
  /** A run that lasted this long counts as healthy (resets the delay and the crash count). */
  healthyAfterMs?: number;
  /** Give up (stop the others, exit non-zero) after this many crashes in a row of one child. */
  maxCrashes?: number;
}

/**
 * `stt supervise`: runs each child (`stt serve` of one group of STT_LAYOUT) and starts a
 * fresh one of a child whenever it exits on its own with a non-zero code or a signal (a
 * fatal error, a native crash, the kernel's OOM killer), with exponential backoff. Each
 * child has its own backoff and crash count: one restarting leaves the others running.
 * A child that ends with code 0 (it was told to stop) is not started again. SIGINT and
 * SIGTERM go to every child, and the supervisor returns once all have stopped. After
 * `maxCrashes` crashes in a row of one child without a healthy run in between it stops
 * the others and returns that child's code, so an orchestrator above it sees the
 * failure instead of a restart loop (and never a service with a part missing).
 *
 * Children stay in the supervisor's process group and hold an IPC channel to it:
 * SIGKILL of the group takes them with it at once, and SIGKILL of the supervisor alone
 * closes the channel, on which a `stt serve` closes its listeners first and exits
 * within a second (shared/process-guard.ts). Either way no child of a dead supervisor
 * keeps the port, and a new instance binds it at once (exclusively).
 *
 * For a machine without an orchestrator (`scripts/start.sh`); under systemd, Docker or
 * Kubernetes run `stt serve` directly and let their restart policy do this.
 *
 * A child's stdout is its own (inherited); its stderr passes through line by line,
 * except uWS's native per-upgrade cork warning, which goes to the log at debug level.
 */
export async function supervise(options: SuperviseOptions): Promise<number> {
  const { logger } = options;
  const initialDelay = options.initialDelayMs ?? 1000;
  const maxDelay = options.maxDelayMs ?? 30_000;
  const healthyAfter = options.healthyAfterMs ?? 60_000;
  const maxCrashes = options.maxCrashes ?? 10;
  let stopping = false;
  let gaveUp: number | undefined;
  const running = new Map<ChildProcess, SupervisedChild>();
  // the backoff waits in progress: a stop ends them at once
  const waits = new Set<() => void>();
  const stopAll = (signal: NodeJS.Signals) => {
    stopping = true;
    for (const [proc, child] of running) {
      if (child.stopsOnMessage && proc.connected) proc.send(STOP_MESSAGE, () => undefined);
      else proc.kill(signal);
    }
    for (const wake of waits) wake();
  };
  process.on("SIGINT", stopAll);
  process.on("SIGTERM", stopAll);

  const keepRunning = async (child: SupervisedChild): Promise<number> => {
    const log = options.children.length > 1 ? logger.child({ group: child.name }) : logger;
    let crashes = 0;
    let delay = initialDelay;
    for (;;) {
      if (stopping) return 0;
      const started = Date.now();
      const { code, signal } = await runOnce(child, log, running);
      if (stopping) return code ?? 0;
      if (code === 0) {
        if (options.children.length > 1) log.warn("supervised process ended cleanly: not restarting it; the others keep running");
        return 0;
      }
      const ranMs = Date.now() - started;
      if (ranMs >= healthyAfter) {
        crashes = 0;
        delay = initialDelay;
      }
      crashes++;
      const exitCode = code ?? 1;
      if (crashes >= maxCrashes) {
        log.error("supervised process keeps crashing: giving up", { crashes, code, signal });
        gaveUp ??= exitCode;
        stopAll("SIGTERM");
        return exitCode;
      }
      log.warn("supervised process exited: restarting", { code, signal, ran_ms: ranMs, restart_in_ms: delay, crashes });
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          waits.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, delay);
        waits.add(wake);
      });
      if (stopping) return exitCode;
      delay = Math.min(delay * 2, maxDelay);
    }
  };

  try {
    const codes = await Promise.all(options.children.map(keepRunning));
    return gaveUp ?? codes.find((c) => c !== 0) ?? 0;
  } finally {
    process.off("SIGINT", stopAll);
    process.off("SIGTERM", stopAll);
  }
}

/** Starts `child` once and resolves when it exits; `running` holds it meanwhile (for signals). */
function runOnce(child: SupervisedChild, logger: Logger, running: Map<ChildProcess, SupervisedChild>): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const [cmd, ...args] = child.command;
  // Our process group (not detached), so a SIGKILL of the group ends the child with us,
  // and an IPC channel, so the child stops itself at once if we die alone. stderr through
  // us: the native per-upgrade uWS warning goes to the log at debug level, every other
  // line to our stderr unchanged.
  const proc = spawn(cmd!, args, { stdio: ["inherit", "inherit", "pipe", "ipc"], env: childEnvironment(child.env) });
  running.set(proc, child);
  createInterface({ input: proc.stderr!, crlfDelay: Infinity }).on("line", (line) => {
    if (UWS_CORK_WARNING.test(line)) logger.debug("uWS upgrade outside a corked callback (deliberate, harmless; docs/realtime.md)");
    else process.stderr.write(`${line}\n`);
  });
  return new Promise((resolve) => {
    proc.once("error", (err) => {
      running.delete(proc);
      logger.error("supervised process could not start", { error: err.message });
      resolve({ code: 127, signal: null });
    });
    proc.once("exit", (code, signal) => {
      running.delete(proc);
      resolve({ code, signal });
    });
  });
}
