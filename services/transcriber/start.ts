import type { RunningService, ServiceContext } from "../context";
import type { TranscriptionEngine } from "../../shared/workers/types";
import { createOpenAIEngine } from "./openai-engine";
import { createPocketsphinxEngine } from "./pocketsphinx/engine";
import { startWorkerService, workerIdFor, type RunningWorker } from "./worker-service";

/**
 * The transcriber service: starts the configured engines, each as a NATS worker that
 * announces itself in the registry. Any process (this one or another host) reaches
 * them through the router in shared/workers.
 *
 * - WORKER_EMBEDDED=pocketsphinx (default): the embedded CPU engine, a pool of
 *   POCKETSPHINX_PROCESSES persistent processes (0 = one per core).
 * - WHISPER_MODEL_PATH: whisper.cpp on the operator's ggml model (never downloaded).
 * - WORKER_OPENAI_URL: an OpenAI-compatible server as a primary worker.
 *
 * Worker ids: `${WORKER_ID}-${kind}` when WORKER_ID is set (stable ids to pin with
 * `worker_id`), else `${kind}-${host}-${pid}-${random}`.
 */
export async function startTranscriber(ctx: ServiceContext): Promise<RunningService> {
  const { config } = ctx;
  const logger = ctx.logger.child({ service: "transcriber" });
  const w = config.workers;
  const running: RunningWorker[] = [];
  const start = async (engine: TranscriptionEngine) => {
    const id = w.workerId ? `${w.workerId}-${engine.kind}` : workerIdFor(engine.kind);
    running.push(await startWorkerService({ nats: ctx.nats, engine, id, heartbeatMs: w.heartbeatMs, logger }));
    // The planes that start after us (and their first requests) should find the worker
    // warm in this process's router: wait (briefly) until the registry watch has it.
    const until = Date.now() + 2000;
    while (ctx.router?.workers && !ctx.router.workers().some((a) => a.id === id && a.warm) && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  try {
    if (w.embedded === "pocketsphinx") {
      await start(
        await createPocketsphinxEngine({
          processes: w.pocketsphinx.processes || undefined,
          realTimeFactor: w.pocketsphinx.realTimeFactor,
          acceptTimeoutMs: w.attemptTimeoutMs,
          logger,
        }),
      );
    }
    if (w.whisperModelPath) {
      const { createWhisperEngine } = await import("./whisper-engine");
      await start(await createWhisperEngine({ modelPath: w.whisperModelPath, realTimeFactor: w.whisperRealTimeFactor, ...w.whisper, logger }));
    }
    if (w.openai) await start(await createOpenAIEngine({ ...w.openai, probeMs: w.heartbeatMs }));
  } catch (err) {
    for (const r of running) await r.stop().catch(() => undefined);
    throw err;
  }
  return {
    name: "transcriber",
    async stop() {
      for (const r of running) await r.stop();
    },
  };
}
