import type { VerboseTranscription } from "../../schemas/transcription";
import { AppError } from "../errors";
import { createFairScheduler, type FairScheduler, type Grant, type QueuedUtterance } from "./fair-scheduler";
import type { TranscribeRequest, WorkerRouter } from "./types";

/**
 * A clip through the engines as pieces (a segment request's, docs/segment.md "Long clips
 * in parallel"; a long committed realtime item's, docs/realtime.md): a clip long enough
 * is cut at its pauses into more pieces than engine slots (the caller's `cut`,
 * domain/transcript/pieces.ts), and its pieces are decoded at once by free engines,
 * costliest first so that the engines' shares of the work even out (in clip order for a
 * streamed answer). Each piece is an ordinary router request (the warm worker's timeout,
 * the fallback provider and the next warm worker apply to it alone, so a piece that fails
 * moves on without redoing the others).
 *
 * Fairness: every piece of every long request in this process waits its turn in one fair
 * scheduler (shared/workers/fair-scheduler.ts, the realtime plane's): owners take turns,
 * a request has at most `inFlight` pieces in the engines (SEGMENT_PIECES_IN_FLIGHT), and
 * all requests together at most what the warm workers announce they take at once. A
 * request hands the scheduler its next piece only when one of its own finishes, so a
 * piece's wait there is other requests' turns, never its own request's queue.
 * Single-piece clips (the single-request path) go straight to the router as before,
 * under the request's own signal (`singlePiece`).
 *
 * One failure ends the request: the other pieces are no longer waited for, and those
 * not yet started never start.
 */
export interface PieceOutcome {
  index: number;
  startSample: number;
  endSample: number;
  /** The engine's answer, times from the piece's start. */
  result: VerboseTranscription;
  workerId: string;
  fallbackUsed: boolean;
  formatted: boolean;
  workerMs: number;
}

export interface PiecesRun {
  readonly count: number;
  /** Piece `i`'s outcome once transcribed; rejects with the run's first failure. */
  piece(i: number): Promise<PieceOutcome>;
  /** Every piece's outcome in order; rejects with the first failure. */
  all(): Promise<PieceOutcome[]>;
}

/** A piece of the clip: samples [startSample, endSample), `index` in clip order. */
interface PieceSlice {
  index: number;
  startSample: number;
  endSample: number;
}

/**
 * Where a clip is cut for `slots()` engines (domain/transcript/pieces.ts `pieceCutter`):
 * the pieces in clip order, and in the order they go to the engines. `slots` is asked
 * only for a clip long enough to be cut.
 */
type PieceCutter = (pcm: Int16Array, slots: () => number) => { plan: readonly PieceSlice[]; order: readonly PieceSlice[] };

export interface PiecesOptions {
  router: WorkerRouter;
  scheduler: FairScheduler;
  cut: PieceCutter;
  /** Most pieces of this request in the engines at once (SEGMENT_PIECES_IN_FLIGHT). */
  inFlight: number;
  pcm: Int16Array;
  /** What every piece's router request carries besides its audio. */
  request: Omit<TranscribeRequest, "pcm" | "signal" | "fallbackOnly" | "timeoutMs">;
  /** The HTTP request's: aborting it stops every piece. */
  signal: AbortSignal;
  owner: string;
  requestId: string;
  /**
   * Multichannel (docs/segment-reference.md "Multichannel"): the channel these pieces are. Every
   * channel of a request is its own run, all under the request's id in the scheduler, so
   * the channels share the request's `inFlight` and even a one-piece channel waits its
   * turn there rather than going straight to the router.
   */
  channel?: number;
}

/** A piece waiting longer than this for an engine (every engine busy with other requests' pieces) fails the request 503. */
const PIECE_MAX_WAIT_MS = 600_000;

/** The process's scheduler for segment pieces: capacity is what the warm workers announce (at least 1). */
export function createPieceScheduler(router: WorkerRouter | undefined): FairScheduler {
  const scheduler = createFairScheduler({
    capacity: () => Math.max(1, router?.capacity?.().requests ?? 1),
    // a busy engine is waited for; the fallback provider is each piece's router's to use
    fallback: () => false,
    maxWaitMs: PIECE_MAX_WAIT_MS,
  });
  // capacity follows the registry: a worker that came up takes waiting pieces
  setInterval(() => scheduler.pump(), 1000).unref();
  return scheduler;
}

/**
 * Engine slots a request's pieces may use at once: the warm workers' announced clips at
 * once (the pinned worker's alone with `worker_id`), at most the per-request cap.
 */
function pieceSlots(router: WorkerRouter, workerId: string | undefined, inFlight: number): number {
  const workers = router.workers?.() ?? [];
  const total = workerId
    ? (workers.find((w) => w.id === workerId && w.warm)?.concurrency ?? 1)
    : (router.capacity?.().requests ?? 1);
  return Math.max(1, Math.min(inFlight, total));
}

export function startPieces(options: PiecesOptions): PiecesRun {
  const { router, scheduler, pcm } = options;
  const { plan, order } = options.cut(pcm, () => pieceSlots(router, options.request.workerId, options.inFlight));
  if (plan.length === 1 && options.channel === undefined) return singlePiece(options, plan[0]!);
  const controller = new AbortController();
  const onAbort = () => controller.abort(options.signal.reason);
  if (options.signal.aborted) onAbort();
  else options.signal.addEventListener("abort", onAbort, { once: true });
  const settled = plan.map(() => deferred<PieceOutcome>());
  let failure: unknown;
  let started = 0;
  let finished = 0;

  const fail = (err: unknown) => {
    if (failure !== undefined) return;
    failure = err;
    controller.abort(err);
    for (const d of settled) d.reject(err);
    options.signal.removeEventListener("abort", onAbort);
  };

  const transcribe = async (slice: PieceSlice, fallbackOnly: boolean): Promise<PieceOutcome> => {
    const out = await router.transcribe({ ...options.request, pcm: pcm.subarray(slice.startSample, slice.endSample), signal: controller.signal, fallbackOnly });
    return { index: slice.index, startSample: slice.startSample, endSample: slice.endSample, result: out.result, workerId: out.workerId, fallbackUsed: out.fallbackUsed, formatted: out.formatted, workerMs: out.workerMs };
  };

  const scheduled = async (slice: PieceSlice): Promise<PieceOutcome> => {
    const itemId = options.channel === undefined ? String(slice.index) : `${options.channel}:${slice.index}`;
    const turn: QueuedUtterance = { owner: options.owner, sessionId: options.requestId, itemId, maxPerSession: options.inFlight, committedAt: Date.now() };
    const grant: Grant = await scheduler.enqueue(turn);
    try {
      if (grant === "expired") throw busy(`no engine was free for a piece of this clip within ${PIECE_MAX_WAIT_MS / 1000} s`);
      if (grant === "stopped") throw busy("the gateway is stopping");
      controller.signal.throwIfAborted();
      return await transcribe(slice, grant === "fallback");
    } finally {
      scheduler.release(turn, grant);
    }
  };

  const startNext = () => {
    if (failure !== undefined || started >= plan.length) return;
    const slice = order[started++]!;
    scheduled(slice).then((outcome) => {
      settled[slice.index]!.resolve(outcome);
      if (++finished === plan.length) options.signal.removeEventListener("abort", onAbort);
      startNext();
    }, fail);
  };
  for (let k = 0; k < Math.min(options.inFlight, plan.length); k++) startNext();

  return {
    count: plan.length,
    piece: (i) => settled[i]!.promise,
    all: () => Promise.all(settled.map((d) => d.promise)),
  };
}

/**
 * A clip that is one piece (every short clip): one router request under the HTTP
 * request's own signal, with none of the machinery that stops sibling pieces or waits
 * for them (a controller, listeners, a promise per piece).
 */
function singlePiece(options: PiecesOptions, slice: PieceSlice): PiecesRun {
  const outcome = options.router
    .transcribe({ ...options.request, pcm: options.pcm.subarray(slice.startSample, slice.endSample), signal: options.signal, fallbackOnly: false })
    .then((out): PieceOutcome => ({ index: slice.index, startSample: slice.startSample, endSample: slice.endSample, result: out.result, workerId: out.workerId, fallbackUsed: out.fallbackUsed, formatted: out.formatted, workerMs: out.workerMs }));
  // nobody may be waiting for the piece when it fails: that is not an unhandled rejection
  outcome.catch(() => undefined);
  return { count: 1, piece: () => outcome, all: () => outcome.then((o) => [o]) };
}

const busy = (message: string) => new AppError("unavailable", "server_busy", message, { headers: { "Retry-After": "5" } });

function deferred<T>(): { promise: Promise<T>; resolve(v: T): void; reject(e: unknown): void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // nobody may be waiting for a piece when the run fails: that is not an unhandled rejection
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}
