import { createServer } from "node:net";
import type { Logger } from "./logger";

/** The listen port is held by another process: a startup error (`stt serve` exits 1 with this message). */
export class PortInUseError extends Error {
  constructor(
    readonly host: string,
    readonly port: number,
    waitedMs: number,
  ) {
    super(
      `cannot listen on ${host}:${port}: the port is in use by another process (waited ${waitedMs} ms for it to be freed). ` +
        `Stop the other process or choose another PORT; STT_REUSE_PORT=true shares a port on purpose (docs/operations.md, "Stopping and restarting").`,
    );
    this.name = "PortInUseError";
  }
}

export interface BindOptions {
  host: string;
  port: number;
  /** Keep trying this long: a predecessor that is still stopping frees the port within its SHUTDOWN_TIMEOUT_MS. */
  waitMs: number;
  everyMs?: number;
  logger?: Logger;
}

/**
 * Binds a listener with `bind`, which resolves the listener, or false when the address
 * is taken. A taken port is retried every `everyMs` for up to `waitMs`, then fails with
 * PortInUseError. The wait is for `scripts/start.sh` right after a crash: the previous
 * `stt serve`, orphaned when its supervisor was killed, stops by itself (IPC disconnect)
 * and closes its listener first, so the new one gets the port instead of failing, and
 * never shares it (the bind is exclusive unless STT_REUSE_PORT).
 */
export async function bindWithin<T>(bind: () => Promise<T | false>, options: BindOptions): Promise<T> {
  const started = Date.now();
  const every = options.everyMs ?? 250;
  let warned = false;
  for (;;) {
    const listener = await bind();
    if (listener !== false) return listener;
    const waited = Date.now() - started;
    if (waited >= options.waitMs) throw new PortInUseError(options.host, options.port, waited);
    if (!warned) {
      options.logger?.warn("listen port in use: waiting for it to be freed (a previous instance still stopping?)", { host: options.host, port: options.port, wait_ms: options.waitMs });
      warned = true;
    }
    await new Promise((r) => setTimeout(r, Math.min(every, options.waitMs - waited)));
  }
}

/**
 * Why `host:port` cannot be listened on, found by trying with Node (uWS only says
 * "no"): `EADDRINUSE` for a taken port, another code (`EADDRNOTAVAIL`: the address is
 * not this machine's) for a listen that no wait will fix, undefined when it is free now.
 */
export function listenErrorCode(host: string, port: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? "EUNKNOWN"));
    probe.listen(port, host, () => probe.close(() => resolve(undefined)));
  });
}
