import { hostname } from "node:os";
import type { Msg, Subscription } from "@nats-io/transport-node";
import type { WorkerAnnouncement, WorkerReply, WorkerRequestHeader } from "../../schemas/segment";
import { AppError, toAppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import { withSpan, withSpanFromHeaders } from "../../shared/telemetry";
import { decodeWorkerRequest, pullPcm, toInt16 } from "../../shared/workers/protocol";
import { registerLocalWorker } from "../../shared/workers/local";
import { announcedCapacity } from "../../shared/workers/registry";
import type { TranscriptionEngine } from "../../shared/workers/types";
import { heardIfSpeech } from "../../shared/audio/speech-gate";

/**
 * Runs one engine as a NATS worker: request/reply on its own subject
 * (topology.subjects.workerRequest(id), what the router posts to) and on the shared
 * workerAny subject in a queue group, so more worker processes on more hosts simply
 * join. It announces itself in the workers KV bucket (id, kind, models, warm/cold,
 * in-flight, concurrency, real-time factor, and the capacity they amount to: clips at
 * once and real-time streams) on every heartbeat and deletes its entry
 * first thing on stop (SIGTERM), so routers stop picking it before it unsubscribes; a
 * crashed worker's entry goes stale, then expires with the bucket TTL (routers that
 * meet its "no responders" drop it sooner). After a NATS reconnect it announces itself
 * at once: a restarted nats-server comes back with an empty registry bucket.
 *
 * Requests whose router deadline has already passed are answered with an error
 * instead of being transcribed: nobody is waiting for them.
 */
export interface WorkerServiceOptions {
  nats: Nats;
  engine: TranscriptionEngine;
  id: string;
  heartbeatMs: number;
  logger: Logger;
}

export interface RunningWorker {
  id: string;
  announce(): Promise<void>;
  stop(): Promise<void>;
}

const deadlinePassed = () => new AppError("unavailable", "deadline_passed", "the caller's deadline passed while the clip was transcribed");

export function workerIdFor(kind: string): string {
  const host = hostname().replace(/[^A-Za-z0-9_-]/g, "-").slice(0, 40);
  return `${kind}-${host}-${process.pid}-${Math.random().toString(36).slice(2, 6)}`;
}

export async function startWorkerService(options: WorkerServiceOptions): Promise<RunningWorker> {
  const { nats, engine, id, logger } = options;
  if (!/^[A-Za-z0-9_-]+$/.test(id)) throw new Error(`worker id ${id} must be letters, digits, - or _`);
  const kv = await nats.kv("workers");
  let inFlight = 0;
  let stopped = false;
  // Observed real-time factor (EWMA over clips of 1 s or more, queueing included):
  // announced when it is worse than the declared one, so the router's timeouts follow
  // a loaded CPU instead of cutting it off.
  let observedRtf = 0;

  const announcement = (): WorkerAnnouncement => {
    const realTimeFactor = Math.max(engine.realTimeFactor, Math.round(observedRtf * 100) / 100);
    return {
      id,
      kind: engine.kind,
      models: engine.models,
      formatsText: engine.formatsText,
      languages: engine.languages ?? ["*"],
      warm: !stopped && engine.warm(),
      inFlight,
      concurrency: engine.concurrency,
      realTimeFactor,
      // the realtime scheduler bounds what it sends by this (docs/realtime.md)
      capacity: announcedCapacity(engine.concurrency, realTimeFactor),
      host: hostname(),
      at: Date.now(),
    };
  };
  const announce = async () => {
    await kv.put(id, JSON.stringify(announcement()));
  };

  /**
   * whisper.cpp invents words on silence and noise ("Thank you.", a loop of one word), and
   * so do the whisper-class servers behind an OpenAI-compatible URL (speaches, vLLM, a
   * hosted API): neither hears a clip without speech (heardIfSpeech), which comes back
   * with empty text. PocketSphinx answers such clips with nothing itself, and hears all.
   */
  const gated = engine.kind !== "pocketsphinx";

  /** One clip: from a NATS request (handle) or, from a router in this process, by a call (shared/workers/local.ts). */
  const serve = async (header: WorkerRequestHeader, readPcm: () => Promise<Int16Array> | Int16Array): Promise<WorkerReply> => {
    inFlight++;
    let reply: WorkerReply;
    try {
      if (!engine.warm()) {
        reply = { ok: false, workerId: id, code: "worker_cold", message: "the worker's engine is not loaded (cold)" };
      } else if (header.deadline !== undefined && Date.now() > header.deadline) {
        reply = { ok: false, workerId: id, code: "deadline_passed", message: "the caller's deadline passed before the clip was taken" };
      } else {
        const pcm = await readPcm();
        const t0 = performance.now();
        // Past the router's deadline nobody waits for the clip: the engine drops it (and a
        // pool engine leaves the process that held it out, see pocketsphinx/engine.ts).
        const late = new AbortController();
        const timer = header.deadline === undefined ? undefined : setTimeout(() => late.abort(deadlinePassed()), Math.max(0, header.deadline - Date.now()));
        const hear = () => engine.transcribe({ pcm, model: header.model, language: header.language, prompt: header.prompt, keyterms: header.keyterms, partial: header.partial, signal: late.signal });
        const result = await (gated ? heardIfSpeech(pcm, header.language, hear) : hear()).finally(() => clearTimeout(timer));
        clearTimeout(timer);
        const seconds = pcm.length / 16_000;
        if (seconds >= 1) {
          const rtf = (performance.now() - t0) / 1000 / seconds;
          observedRtf = observedRtf === 0 ? rtf : 0.7 * observedRtf + 0.3 * rtf;
        }
        reply = { ok: true, workerId: id, result };
      }
    } catch (err) {
      const e = toAppError(err, "worker_error");
      logger.warn("worker request failed", { workerId: id, code: e.code, error: e.message });
      reply = { ok: false, workerId: id, code: e.code, message: e.message };
    } finally {
      inFlight--;
    }
    return reply;
  };

  const handle = async (msg: Msg) => {
    let reply: WorkerReply;
    try {
      const { header, pcmBytes } = decodeWorkerRequest(msg.data);
      reply = await serve(header, () => (header.pullSubject ? pullPcm(nats.nc, header.pullSubject, header.samples, 5000) : toInt16(pcmBytes)));
    } catch (err) {
      const e = toAppError(err, "worker_error");
      logger.warn("worker request failed", { workerId: id, code: e.code, error: e.message });
      reply = { ok: false, workerId: id, code: e.code, message: e.message };
    }
    if (msg.reply) msg.respond(JSON.stringify(reply));
  };

  // the request's span continues the caller's trace (the router sends `traceparent`)
  const traced = (m: Msg) => withSpanFromHeaders(`worker ${engine.kind} transcribe`, m.headers, () => handle(m));

  const subs: Subscription[] = [
    nats.nc.subscribe(nats.topology.subjects.workerRequest(id), { callback: (_e, m) => void traced(m) }),
    nats.nc.subscribe(nats.topology.subjects.workerAny, { queue: `${nats.topology.prefix}_workers`, callback: (_e, m) => void traced(m) }),
  ];
  await nats.nc.flush();
  // a call from this process's router: the span is the caller's child by context
  const unregister = registerLocalWorker(id, (header, pcm) => withSpan(`worker ${engine.kind} transcribe`, {}, () => serve(header, () => pcm)));
  await announce();
  let announcing: Promise<void> = Promise.resolve();
  const heartbeat = () =>
    (announcing = announce().catch((err) => logger.warn("worker heartbeat failed", { workerId: id, error: String(err) })));
  const timer = setInterval(() => void heartbeat(), options.heartbeatMs);
  const unhook = nats.onReconnect(() => {
    if (!stopped) void heartbeat();
  });
  logger.info("worker started", { workerId: id, kind: engine.kind, models: engine.models });

  return {
    id,
    announce,
    async stop() {
      stopped = true;
      unregister();
      clearInterval(timer);
      unhook();
      await announcing; // a heartbeat landing after the delete would resurrect the entry
      await kv.delete(id).catch((err) => logger.warn("worker registry entry not deleted; it expires with its heartbeat", { workerId: id, error: String(err) }));
      // A router that has not seen the delete yet gets "no responders" and moves on.
      for (const s of subs) s.unsubscribe();
      await engine.close();
    },
  };
}
