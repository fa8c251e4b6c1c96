import { startHttpGateway } from "../http-gateway/start";
import { jobServiceDefs } from "../jobs/start";
import { startProjector } from "../projector/start";
import { startTranscriber } from "../transcriber/start";
import { startRealtimeGatewayService } from "../realtime-gateway/start";
import { startRtTranscriberService } from "../rt-transcriber/start";
import { startVadService } from "../vad/start";
import { startWebhooks } from "../webhooks/start";
import type { ServiceDef } from "../context";

/**
 * Every runnable service, in start order. `STT_SERVICES=all` (the embedded default)
 * runs them all in one process; a comma list runs a subset (scale-out: one service
 * per deployment, more replicas on the same durable consumers).
 */
export const serviceDefs: ServiceDef[] = [
  { name: "projector", start: startProjector },
  // before the planes that call the router: the embedded worker is warm when they start
  { name: "transcriber", start: startTranscriber },
  { name: "http-gateway", start: startHttpGateway },
  { name: "vad", start: startVadService },
  { name: "rt-transcriber", start: startRtTranscriberService },
  // batch jobs: process manager and one durable consumer per step
  ...jobServiceDefs,
  { name: "webhooks", start: startWebhooks },
  // after http-gateway: serves its fetch handler on the one port
  { name: "realtime-gateway", start: startRealtimeGatewayService },
];
