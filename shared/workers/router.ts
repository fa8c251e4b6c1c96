import { createInbox } from "@nats-io/transport-node";
import { randomUUID } from "node:crypto";
import { workerReply, type WorkerAnnouncement, type WorkerRequestHeader } from "../../schemas/segment";
import type { VerboseTranscription } from "../../schemas/transcription";
import { AppError } from "../errors";
import type { Logger } from "../logger";
import type { Nats } from "../nats";
import { SpanKind, traceHeaders, withSpan } from "../telemetry";
import { transcriptionDuration, transcriptionOutcomes } from "../metrics";
import { transcribeWithOpenAI, type OpenAIEndpoint } from "./openai-client";
import { localWorker, type LocalWorker } from "./local";
import { encodeWorkerRequest, inlineCapacity, servePcm } from "./protocol";
import { warmCapacity, watchWorkerRegistry, type WorkerRegistry } from "./registry";
import type { TranscribeRequest, TranscribeResult, WorkerRouter } from "./types";
import { ConnectionLost, describeFailure, isNoResponders, isTimeout, TranscriptionFailed, TRANSIENT_WORKER_CODES, WorkerLost } from "./attempt-failures";
import { heardIfSpeech } from "../audio/speech-gate";

export { isTransientRoutingFailure } from "./attempt-failures";

/**
 * The worker router (spec section 8, design "Transcription workers").
 *
 * 1. Primary: a warm worker from the registry. `workerId` pins one; otherwise the
 *    least loaded warm worker (local in-flight count over its concurrency), preferring
 *    workers that serve the language hint, then workers that list the requested
 *    model (preferences only: any warm worker beats none). A cold or missing primary
 *    is not posted.
 * 2. Fallback provider (an OpenAI-compatible server), used when the primary timed
 *    out, failed, or was cold/missing. X-Fallback-Used reports it.
 * 3. At most two attempts; no retry beyond them. Without a fallback, a primary that
 *    timed out or could not take the clip is followed by the next warm worker (not a
 *    pinned one, nor after an engine's own error). Both failing (or no fallback and no
 *    other worker) → 502 `transcription_failed` naming the timeouts in ms.
 *
 * A worker in another process whose attempt timed out is left out of rotation until its
 * next heartbeat, like one with no responders: a stopped process keeps its subscription,
 * so NATS keeps delivering clips nobody answers (docs/workers.md, routing rule 5).
 *
 * "No responders" is not an attempt: NATS answers it at once when nothing subscribes
 * to the worker's subject, so no worker received the clip (it died, or stopped before
 * its registry entry went). Nor is a worker in another process that stops announcing
 * itself while it holds the clip (its entry stale for `staleMs`: it died, and its answer
 * will never come): the request stops waiting then, not at its timeout. The router marks that worker dead (left out until a newer
 * heartbeat) and picks the next warm worker; only a worker that received the clip
 * counts as the primary attempt. A pinned worker has no next one.
 *
 * A failure where no engine answered at all (nothing warm, no responders, timed out,
 * NATS connection lost) is a `TranscriptionFailed` with `transient` set: the batch
 * plane retries those later instead of spending its attempts at once. A request in
 * flight when the NATS connection drops is failed at once (its reply could be lost),
 * not left to wait out its timeout.
 *
 * Per-attempt timeout: `max(budgetMs, clipSeconds × realTimeFactor × 1.5 × 1000 + 250)`.
 * The 800 ms budget is the spec's for GPU-class workers and short client-VAD clips;
 * each worker declares its real-time factor, so a CPU engine gets the time the clip
 * needs with a 50% margin and 250 ms of transport, and any clip the plan allows can
 * be transcribed. The fallback provider's factor is configured
 * (FALLBACK_REAL_TIME_FACTOR). For short clips the rule reduces to the spec's 800 ms
 * per attempt and ~1.6 s wall clock. When clips are already queued at the chosen
 * worker (in flight ≥ its concurrency), the factor is multiplied by
 * 1 + ⌊in-flight / concurrency⌋: they run first.
 *
 * Capacity: `capacity()` sums what the warm workers announce (clips at once,
 * real-time streams); the realtime scheduler keeps its utterances in flight within it
 * and sends the overflow with `fallbackOnly` straight to the fallback provider.
 *
 * A worker whose engine runs in this process is handed the clip by a call, not a NATS
 * request through the server and back (shared/workers/local.ts): the same choice,
 * timeout, deadline and answers, without framing and copying the PCM twice.
 *
 * A `partial` request (a realtime item's re-decode, services/vad/redecode.ts) is the
 * first work dropped: a warm worker with a free slot now, or `engine_busy` at once; no
 * fallback, no second attempt, no breaker count. An `ahead` request (an item's final
 * decoded before its commit) is dropped alike; the commit path decodes the item then.
 *
 * Circuit breaker (for realtime admission): `breakerThreshold` consecutive requests
 * that fail outright open it for `breakerOpenMs`; the first request after that
 * half-opens it.
 */
export interface RouterOptions {
  nats: Nats;
  budgetMs: number;
  fallback?: OpenAIEndpoint & { realTimeFactor?: number };
  /** Registry entries whose heartbeat is older than this are ignored. */
  staleMs: number;
  logger?: Logger;
  breakerThreshold?: number;
  breakerOpenMs?: number;
  now?: () => number;
  /**
   * Hand workers that run in this process their clip by a call (shared/workers/local.ts)
   * instead of over NATS (default true; tests of the NATS path turn it off).
   */
  localWorkers?: boolean;
}

export interface RunningRouter extends WorkerRouter {
  /** Workers with a fresh heartbeat, as the registry shows them. */
  workers(): WorkerAnnouncement[];
  rotation(): { warm: string[]; leftOut: string[] };
  stop(): Promise<void>;
}

const TIMEOUT_MARGIN = 1.5;
const TRANSPORT_MS = 250;

/** The documented per-attempt timeout rule. */
export function attemptTimeoutMs(budgetMs: number, clipSeconds: number, realTimeFactor: number): number {
  return Math.max(budgetMs, Math.ceil(clipSeconds * realTimeFactor * TIMEOUT_MARGIN * 1000 + TRANSPORT_MS));
}

export async function createWorkerRouter(options: RouterOptions): Promise<RunningRouter> {
  const now = options.now ?? Date.now;
  const { nats } = options;
  const registry: WorkerRegistry = await watchWorkerRegistry(nats, {
    staleMs: options.staleMs,
    now,
    logger: options.logger,
  });
  // Worker requests in flight, failed at once when the connection drops.
  const pending = new Set<AbortController>();
  let closed = false;
  void (async () => {
    for await (const s of nats.nc.status()) {
      if (closed) break;
      if (s.type !== "disconnect") continue;
      for (const c of pending) c.abort(new ConnectionLost());
    }
  })().catch(() => undefined);
  const localInFlight = new Map<string, number>();
  const threshold = options.breakerThreshold ?? 5;
  const openMs = options.breakerOpenMs ?? 10_000;
  let consecutiveFailures = 0;
  let openUntil = 0;

  const load = (w: WorkerAnnouncement) => (localInFlight.get(w.id) ?? 0) / Math.max(1, w.concurrency);

  const pickPrimary = (request: TranscribeRequest, skipped: ReadonlySet<string>): { worker?: WorkerAnnouncement; reason?: string } => {
    if (request.workerId) {
      const w = registry.get(request.workerId);
      if (!w) return { reason: `worker ${request.workerId} is not registered, or is left out of rotation until it announces itself again` };
      if (!w.warm) return { reason: `worker ${request.workerId} is cold` };
      return { worker: w };
    }
    const warm = registry.list().filter((w) => w.warm && !skipped.has(w.id));
    if (warm.length === 0) return { reason: skipped.size ? "no other warm worker is registered" : "no warm worker is registered" };
    // Preferences, not requirements: any warm worker beats none.
    const prefer = (pool: WorkerAnnouncement[], ok: (w: WorkerAnnouncement) => boolean) => {
      const better = pool.filter(ok);
      return better.length ? better : pool;
    };
    const language = request.language?.toLowerCase().split("-")[0];
    let pool = warm;
    if (language) pool = prefer(pool, (w) => w.languages.includes("*") || w.languages.includes(language));
    if (request.model) pool = prefer(pool, (w) => w.models.includes(request.model!));
    // the least loaded; equally loaded ones each as likely (a coin per tie favoured the last)
    let best = pool[0]!;
    let ties = 1;
    for (const w of pool.slice(1)) {
      if (load(w) < load(best)) {
        best = w;
        ties = 1;
      } else if (load(w) === load(best) && Math.random() * ++ties < 1) best = w;
    }
    return { worker: best };
  };

  const postToWorker = async (worker: WorkerAnnouncement, request: TranscribeRequest, timeoutMs: number): Promise<VerboseTranscription> => {
    const nc = nats.nc;
    const requestId = randomUUID();
    const header = {
      requestId,
      model: request.model,
      language: request.language,
      prompt: request.prompt,
      ...(request.keyterms?.length ? { keyterms: request.keyterms } : {}),
      ...(request.partial ? { partial: true } : {}),
      samples: request.pcm.length,
      deadline: now() + timeoutMs,
    };
    const local = options.localWorkers === false ? undefined : localWorker(worker.id);
    const span = { kind: SpanKind.CLIENT, attributes: { "worker.id": worker.id, "audio.samples": request.pcm.length } };
    if (local) return withSpan(`worker request ${worker.kind}`, span, () => callLocalWorker(worker.id, local, header, request, timeoutMs));
    const inline = request.pcm.byteLength <= inlineCapacity(nc);
    let stopServing: (() => void) | undefined;
    let payload: Uint8Array;
    if (inline) {
      payload = encodeWorkerRequest(header, request.pcm);
    } else {
      const pullSubject = createInbox(`${nats.topology.prefix}.worker.pull`);
      stopServing = servePcm(nc, pullSubject, request.pcm);
      payload = encodeWorkerRequest({ ...header, pullSubject });
    }
    localInFlight.set(worker.id, (localInFlight.get(worker.id) ?? 0) + 1);
    const lost = new AbortController();
    pending.add(lost);
    // A worker that dies holding the clip never answers: once its heartbeats stop, stop waiting.
    const watch = setInterval(() => registry.lost(worker.id) && lost.abort(new WorkerLost(worker.id)), Math.max(250, options.staleMs / 4));
    try {
      const reply = await withSpan(`worker request ${worker.kind}`, span, () =>
        withSignal(withSignal(nc.request(nats.topology.subjects.workerRequest(worker.id), payload, { timeout: timeoutMs, headers: traceHeaders() }), lost.signal), request.signal),
      );
      const parsed = workerReply.parse(reply.json());
      if (!parsed.ok) throw new AppError("upstream", parsed.code, `worker ${worker.id}: ${parsed.message}`);
      return parsed.result;
    } finally {
      pending.delete(lost);
      clearInterval(watch);
      stopServing?.();
      localInFlight.set(worker.id, Math.max(0, (localInFlight.get(worker.id) ?? 1) - 1));
    }
  };

  /** A worker in this process: the same attempt by a call (shared/workers/local.ts). */
  const callLocalWorker = async (id: string, local: LocalWorker, header: WorkerRequestHeader, request: TranscribeRequest, timeoutMs: number): Promise<VerboseTranscription> => {
    localInFlight.set(id, (localInFlight.get(id) ?? 0) + 1);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new DOMException(`timed out after ${timeoutMs} ms`, "TimeoutError")), timeoutMs);
    });
    try {
      const reply = await withSignal(Promise.race([local(header, request.pcm), timedOut]), request.signal);
      if (!reply.ok) throw new AppError("upstream", reply.code, `worker ${id}: ${reply.message}`);
      return reply.result;
    } finally {
      clearTimeout(timer);
      localInFlight.set(id, Math.max(0, (localInFlight.get(id) ?? 1) - 1));
    }
  };

  const postToFallback = async (request: TranscribeRequest, timeoutMs: number): Promise<VerboseTranscription> => {
    // An explicit controller and timer, not AbortSignal.any([AbortSignal.timeout(…)]): the
    // composite holds its sources weakly, so the timeout signal can be garbage-collected
    // and never fire (seen here under GC pressure: the fallback then waited out the server).
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, "TimeoutError")), timeoutMs);
    const onAbort = () => controller.abort(request.signal!.reason);
    request.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      // a whisper-class provider invents words on silence and noise: it hears speech only (speech-gate.ts)
      return await heardIfSpeech(request.pcm, request.language, () => transcribeWithOpenAI(options.fallback!, { ...request, signal: controller.signal }));
    } finally {
      clearTimeout(timer);
      request.signal?.removeEventListener("abort", onAbort);
    }
  };

  /** A partial re-decode or a final ahead of its commit (TranscribeRequest.partial, .ahead): a free slot of a warm worker now, or nothing. */
  const transcribePartial = async (request: TranscribeRequest): Promise<TranscribeResult> => {
    const { worker } = pickPrimary(request, new Set());
    const busy = (w: WorkerAnnouncement) => Math.max(localInFlight.get(w.id) ?? 0, w.inFlight) >= w.concurrency;
    if (!worker || busy(worker)) throw new AppError("unavailable", "engine_busy", "no worker has a free slot for a partial re-decode");
    const started = performance.now();
    const timeoutMs = request.timeoutMs ?? attemptTimeoutMs(options.budgetMs, request.pcm.length / 16_000, worker.realTimeFactor);
    const result = await postToWorker(worker, request, timeoutMs);
    return { result, workerId: worker.id, fallbackUsed: false, formatted: engineFormats(worker), workerMs: performance.now() - started };
  };

  const fail = (message: string, transient: boolean): never => {
    transcriptionOutcomes.inc({ outcome: "failed", code: transient ? "transient" : "engine_error" });
    consecutiveFailures++;
    if (consecutiveFailures >= threshold) openUntil = now() + openMs;
    throw new TranscriptionFailed(message, transient);
  };

  return {
    workers: () => registry.list(),
    rotation: () => ({ warm: registry.list().filter((w) => w.warm).map((w) => w.id), leftOut: registry.leftOut() }),
    capacity: () => warmCapacity(registry.list()),
    hasFallback: () => options.fallback !== undefined,
    available: () => now() >= openUntil && (options.fallback !== undefined || registry.list().some((w) => w.warm)),
    retryAfterSeconds: () => Math.max(0, Math.ceil((openUntil - now()) / 1000)),
    async transcribe(request) {
      if (request.partial || request.ahead) return transcribePartial(request);
      const clipSeconds = request.pcm.length / 16_000;
      const started = performance.now();
      const failures: string[] = [];
      const skipped = new Set<string>();
      const noResponders = new Set<string>();
      /** The timeout of every attempt made, in order (for the 502's message). */
      const timeouts: number[] = [];
      let worker: WorkerAnnouncement | undefined;
      // Whether an engine answered (with an error): a repeat would likely fail alike.
      let engineAnswered = false;
      if (request.fallbackOnly) failures.push("primary skipped: the local engines are at capacity");
      // Workers that turn out to have no responders are skipped (not attempts); the
      // loop ends with a result, a real attempt, or nobody left to try. A worker whose
      // attempt timed out is left out of rotation; without a fallback the second attempt
      // goes to the next warm worker.
      let attempts = 0;
      while (!request.fallbackOnly) {
        const pick = pickPrimary(request, skipped);
        if (!pick.worker) {
          failures.push(`${attempts ? "second attempt" : "primary"} not posted: ${pick.reason}`);
          break;
        }
        worker = pick.worker;
        // Clips already queued at that worker run first: scale the engine's share.
        const ahead = Math.max(localInFlight.get(worker.id) ?? 0, worker.inFlight);
        const queueFactor = 1 + Math.floor(ahead / Math.max(1, worker.concurrency));
        const timeoutMs = request.timeoutMs ?? attemptTimeoutMs(options.budgetMs, clipSeconds, worker.realTimeFactor * queueFactor);
        timeouts.push(timeoutMs);
        try {
          const result = await postToWorker(worker, request, timeoutMs);
          consecutiveFailures = 0;
          const workerMs = performance.now() - started;
          transcriptionOutcomes.inc({ outcome: "ok", code: "" });
          transcriptionDuration.observe({ engine: worker.kind }, workerMs / 1000);
          return { result, workerId: worker.id, fallbackUsed: false, formatted: engineFormats(worker), workerMs };
        } catch (err) {
          if (request.signal?.aborted) throw err;
          failures.push(describeFailure(worker.id, err, timeoutMs));
          skipped.add(worker.id);
          if (isNoResponders(err) || err instanceof WorkerLost) {
            timeouts.pop();
            registry.markDead(worker.id);
            noResponders.add(worker.id);
            options.logger?.warn(`worker ${err instanceof WorkerLost ? "lost holding a clip" : "has no responders"}; marked dead until its next heartbeat`, { workerId: worker.id });
            if (request.workerId) break;
            continue;
          }
          attempts++;
          engineAnswered = err instanceof AppError && err.kind === "upstream" && !TRANSIENT_WORKER_CODES.has(err.code);
          // A worker in this process is not frozen (this code runs); its engine deals
          // with a frozen process of its own (pocketsphinx/engine.ts).
          const inProcess = options.localWorkers !== false && localWorker(worker.id) !== undefined;
          if (isTimeout(err) && !inProcess) {
            // Frozen or far too slow: a stopped process keeps its subscription, so NATS
            // keeps handing it clips that nobody answers. Leave it out until it heartbeats.
            registry.markDead(worker.id);
            options.logger?.warn("worker attempt timed out; left out of rotation until its next heartbeat", { workerId: worker.id, timeoutMs });
          } else {
            options.logger?.warn("worker attempt failed", { workerId: worker.id, error: failures.at(-1) });
          }
          // At most two attempts: the second is the fallback's, or, without one, the next
          // warm worker's when the first gave no engine's answer.
          if (options.fallback || request.workerId || engineAnswered || attempts >= 2) break;
        }
      }
      if (worker && noResponders.has(worker.id)) worker = undefined; // no clip was delivered: not an attempt
      if (!options.fallback) {
        return fail(`transcription failed: ${failures.join("; ")}; no fallback provider is configured (per-attempt timeout ${timeouts.join(" ms and ") || options.budgetMs} ms)`, !engineAnswered);
      }
      const fallbackTimeout = request.timeoutMs ?? attemptTimeoutMs(options.budgetMs, clipSeconds, options.fallback.realTimeFactor ?? 0.1);
      const fallbackStarted = performance.now();
      try {
        const result = await postToFallback(request, fallbackTimeout);
        consecutiveFailures = 0;
        transcriptionOutcomes.inc({ outcome: "fallback", code: "" });
        transcriptionDuration.observe({ engine: "fallback" }, (performance.now() - fallbackStarted) / 1000);
        return { result, workerId: "fallback", fallbackUsed: true, formatted: true, workerMs: performance.now() - fallbackStarted + (worker ? fallbackStarted - started : 0) };
      } catch (err) {
        if (request.signal?.aborted) throw err;
        failures.push(describeFailure("fallback", err, fallbackTimeout));
        timeouts.push(fallbackTimeout);
        // The fallback is an HTTP provider: it answering with an error is not transient.
        return fail(`transcription failed after ${timeouts.length} attempt(s) (per-attempt timeout ${timeouts.join(" ms and ")} ms): ${failures.join("; ")}`, !engineAnswered && (isTimeout(err) || (err instanceof AppError && TRANSIENT_WORKER_CODES.has(err.code))));
      }
    },
    async stop() {
      closed = true;
      await registry.stop();
    },
  };
}

/** `p`, or the signal's reason once it aborts. */
function withSignal<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

/** Engines that announce nothing: PocketSphinx is the one whose words come unformatted. */
function engineFormats(w: Pick<WorkerAnnouncement, "kind" | "formatsText">): boolean {
  return w.formatsText ?? w.kind !== "pocketsphinx";
}
