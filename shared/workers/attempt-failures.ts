import { AppError } from "../errors";

/**
 * How the worker router (router.ts) tells its attempts' failures apart: an engine's own
 * error (a repeat would fail alike), or no engine answering at all (nothing warm, no
 * responders, a timeout, the NATS connection lost), which the batch plane retries later.
 */

/**
 * The router's 502 `transcription_failed`. `transient` when no engine answered (nothing
 * warm, no responders, a timeout, the NATS connection lost): trying again later may
 * well succeed, whereas an engine's own error would repeat.
 */
export class TranscriptionFailed extends AppError {
  readonly transient: boolean;
  constructor(message: string, transient: boolean) {
    super("upstream", "transcription_failed", message, { type: "invalid_request_error" });
    this.transient = transient;
  }
}

export const isTransientRoutingFailure = (err: unknown): boolean => err instanceof TranscriptionFailed && err.transient;

/** Engine answers that say "not now" rather than "this clip fails": cold, too late, unreachable. */
export const TRANSIENT_WORKER_CODES = new Set(["worker_cold", "deadline_passed", "worker_unreachable"]);

/** The reason a request in flight was abandoned when the NATS connection dropped. */
export class ConnectionLost extends Error {
  constructor() {
    super("the NATS connection was lost while waiting for the reply");
    this.name = "ConnectionLost";
  }
}

/**
 * The worker holding the clip stopped announcing itself (its registry entry went stale
 * while the request waited): it died, so its answer will never come. Like no responders,
 * not an attempt: the clip goes to the next warm worker.
 */
export class WorkerLost extends Error {
  constructor(id: string) {
    super(`worker ${id} stopped announcing itself while it held the clip`);
    this.name = "WorkerLost";
  }
}

/** NATS answered that nothing subscribes to the subject: no worker received the clip. */
export function isNoResponders(err: unknown): boolean {
  const e = err as { code?: string; name?: string; message?: string; cause?: { name?: string }; isNoResponders?: () => boolean };
  return e?.isNoResponders?.() === true || e?.cause?.name === "NoResponders" || e?.name === "NoResponders" || /no responders/i.test(e?.message ?? "") || e?.code === "503";
}

export function isTimeout(err: unknown): boolean {
  const e = err as { code?: string; name?: string; message?: string };
  return e?.name === "TimeoutError" || /timeout|timed out/i.test(e?.message ?? "") || e?.code === "TIMEOUT";
}

/** One attempt's failure, as the 502's message lists it. */
export function describeFailure(who: string, err: unknown, timeoutMs: number): string {
  if (err instanceof ConnectionLost || err instanceof WorkerLost) return `${who}: ${err.message}`;
  if (isTimeout(err)) return `${who} timed out after ${timeoutMs} ms`;
  if (isNoResponders(err)) return `${who} has no responders`;
  const e = err as { message?: string };
  return `${who} failed: ${(e?.message ?? String(err)).slice(0, 200)}`;
}
