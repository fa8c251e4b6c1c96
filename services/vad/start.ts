import { defaultTurnDetection } from "../../schemas/realtime";
import type { RunningService, ServiceContext } from "../context";
import { createRedecodePool } from "./redecode";
import { createStreamDecoderPool } from "./stream-decoders";
import { startVadConsumers } from "./vad-consumer";

/**
 * The vad service: partitioned server-VAD consumers over RT_AUDIO, partitions shared
 * among replicas; with streaming on (config realtime.partials) it also holds the local
 * pool of streaming PocketSphinx decoders the partition owner feeds, or, for engines that
 * decode whole clips, the re-decodes of open items through the worker router (redecode.ts).
 */
export async function startVadService(ctx: ServiceContext): Promise<RunningService> {
  const rt = ctx.config.realtime;
  const v = rt.vad;
  const logger = ctx.logger.child({ service: "vad" });
  const decoders =
    rt.partials === "decoders"
      ? await createStreamDecoderPool({ size: rt.streamDecoders, warm: rt.streamDecodersWarm, logger: logger.child({ component: "stream-decoders" }) })
      : rt.partials === "redecode"
        ? createRedecodePool({ router: () => ctx.router, size: rt.streamDecoders, wholeUnderSamples: ctx.config.workers.pieces.splitMinSeconds * 16_000, logger: logger.child({ component: "redecode" }) })
        : null;
  const vad = await startVadConsumers({
    nats: ctx.nats,
    logger,
    sessions: ctx.sessions,
    partitions: rt.vadPartitions,
    leaseTtlMs: rt.vadLeaseTtlMs,
    decoders,
    speakerCores: rt.admission.speakerCores,
    defaults: {
      ...defaultTurnDetection,
      threshold: v.threshold,
      aggressiveness: v.aggressiveness,
      silence_duration_ms: v.silenceMs,
      prefix_padding_ms: v.prefixPaddingMs,
      max_utterance_ms: v.maxUtteranceMs,
    },
  });
  return {
    name: "vad",
    stop: async () => {
      await vad.stop();
      await decoders?.close();
    },
  };
}
