import { defaultTurnDetection } from "../../schemas/realtime";
import type { RunningService, ServiceContext } from "../context";
import { createStreamDecoderPool } from "./stream-decoders";
import { startVadConsumers } from "./vad-consumer";

/**
 * The vad service: partitioned server-VAD consumers over RT_AUDIO, partitions shared
 * among replicas; with streaming on (config realtime.streaming) it also holds the local
 * pool of streaming PocketSphinx decoders the partition owner feeds.
 */
export async function startVadService(ctx: ServiceContext): Promise<RunningService> {
  const rt = ctx.config.realtime;
  const v = rt.vad;
  const logger = ctx.logger.child({ service: "vad" });
  const decoders = rt.streaming ? await createStreamDecoderPool({ size: rt.streamDecoders, warm: rt.streamDecodersWarm, logger: logger.child({ component: "stream-decoders" }) }) : null;
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
