import type { RunningService, ServiceContext } from "../context";
import { startRtTranscriber } from "./transcribe-utterances";

/** The rt-transcriber service: realtime utterances → worker router → transcript events. */
export async function startRtTranscriberService(ctx: ServiceContext): Promise<RunningService> {
  const consumer = await startRtTranscriber({
    nats: ctx.nats,
    sessions: ctx.sessions,
    logger: ctx.logger.child({ service: "rt-transcriber" }),
    router: () => ctx.router,
    concurrency: ctx.config.realtime.transcribeConcurrency,
    maxWaitMs: ctx.config.realtime.maxTranscriptWaitMs,
    pieces: ctx.config.workers.pieces,
  });
  return { name: "rt-transcriber", stop: () => consumer.stop() };
}
