import { defaultTurnDetection } from "../../schemas/realtime";
import type { RunningService, ServiceContext } from "../../shared/service";
import { startVadConsumers } from "./vad-consumer";

/** The vad service: partitioned server-VAD consumers over RT_AUDIO, partitions shared among replicas. */
export async function startVadService(ctx: ServiceContext): Promise<RunningService> {
  const v = ctx.config.realtime.vad;
  const vad = await startVadConsumers({
    nats: ctx.nats,
    logger: ctx.logger.child({ service: "vad" }),
    partitions: ctx.config.realtime.vadPartitions,
    leaseTtlMs: ctx.config.realtime.vadLeaseTtlMs,
    defaults: {
      ...defaultTurnDetection,
      threshold: v.threshold,
      aggressiveness: v.aggressiveness,
      silence_duration_ms: v.silenceMs,
      prefix_padding_ms: v.prefixPaddingMs,
      max_utterance_ms: v.maxUtteranceMs,
    },
  });
  return { name: "vad", stop: () => vad.stop() };
}
