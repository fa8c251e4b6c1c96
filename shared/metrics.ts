import { createServer, type Server } from "node:http";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";

/**
 * Prometheus metrics (prom-client), one registry per process: `/metrics` on a process
 * that serves HTTP, `METRICS_PORT` for one that does not (docs/operations.md "Metrics").
 *
 * Labels never carry a tenant, key, session or job id (no secrets, bounded cardinality):
 * routes are route patterns, engines are kinds, steps and durables are names.
 * Counters are incremented where the thing happens; gauges that describe shared state
 * (consumer lag, job states, projection lag, workers) are read when scraped, through
 * the collectors a runtime registers (`addScrapeCollector`).
 */
const registry = new Registry();
collectDefaultMetrics({ register: registry });

const latency = [0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30];

// ------------------------------------------------------------------ HTTP
export const httpRequests = new Counter({ name: "stt_http_requests_total", help: "HTTP requests by method, route pattern and status.", labelNames: ["method", "route", "status"], registers: [registry] });
export const httpDuration = new Histogram({ name: "stt_http_request_duration_seconds", help: "HTTP request duration by method, route pattern and status.", labelNames: ["method", "route", "status"], buckets: latency, registers: [registry] });

// ------------------------------------------------------------------ realtime
export const rtSessionsOpen = new Gauge({ name: "stt_realtime_sessions_open", help: "Realtime sessions open on this gateway.", registers: [registry] });
export const rtSessionsOpened = new Counter({ name: "stt_realtime_sessions_opened_total", help: "Realtime sessions opened (session.created sent).", registers: [registry] });
export const rtSessionCloses = new Counter({ name: "stt_realtime_session_closes_total", help: "Realtime sessions closed, by close code.", labelNames: ["code"], registers: [registry] });
export const rtAdmissionsRefused = new Counter({ name: "stt_realtime_admissions_refused_total", help: "Realtime upgrades refused 503 for want of headroom, by reason (domain/sessions/admission.ts).", labelNames: ["reason"], registers: [registry] });
export const rtSessionsShed = new Counter({ name: "stt_realtime_sessions_shed_total", help: "Admitted realtime sessions given back (newest first, closed 1013 upstream_backpressure) while the plane was far behind, by reason.", labelNames: ["reason"], registers: [registry] });
export const rtAudioFrames = new Counter({ name: "stt_realtime_audio_frames_total", help: "Binary audio frames received from clients.", registers: [registry] });
export const rtAudioBytes = new Counter({ name: "stt_realtime_audio_bytes_total", help: "Audio bytes received from clients (as sent, before resampling).", registers: [registry] });
export const rtVadDecision = new Histogram({
  name: "stt_realtime_vad_decision_seconds",
  help: "speech_stopped sent to the client − when the audio that let the VAD decide (end of speech + silence_duration_ms) was due on the session's real-time pacing.",
  buckets: latency,
  registers: [registry],
});
export const rtFirstPartial = new Histogram({ name: "stt_realtime_first_partial_seconds", help: "First partial (non-empty delta or interim) of an item sent − its speech_started sent.", buckets: latency, registers: [registry] });
export const rtFinal = new Histogram({ name: "stt_realtime_final_seconds", help: "An item's completed sent − its speech_stopped sent (engine included).", buckets: latency, registers: [registry] });
export const rtTranscripts = new Counter({ name: "stt_realtime_transcripts_total", help: "Realtime item outcomes sent to clients: completed or failed.", labelNames: ["outcome"], registers: [registry] });

// ------------------------------------------------------------------ transcription
export const transcriptionDuration = new Histogram({
  name: "stt_transcription_duration_seconds",
  help: "Engine time per transcription request, by engine kind (the worker's own, or `fallback`).",
  labelNames: ["engine"],
  buckets: latency,
  registers: [registry],
});
export const transcriptionOutcomes = new Counter({
  name: "stt_transcriptions_total",
  help: "Transcription requests through the worker router by outcome: ok, fallback (answered by the fallback provider) or failed (with its error code).",
  labelNames: ["outcome", "code"],
  registers: [registry],
});
export const workersGauge = new Gauge({ name: "stt_workers", help: "Workers in the registry by kind and state (warm, cold).", labelNames: ["kind", "state"], registers: [registry] });
export const workersInFlight = new Gauge({ name: "stt_workers_in_flight", help: "Requests in flight on the workers this process's router knows, by kind.", labelNames: ["kind"], registers: [registry] });
export const workersCapacity = new Gauge({ name: "stt_workers_capacity", help: "Concurrent requests the warm workers announce, by kind.", labelNames: ["kind"], registers: [registry] });

// ------------------------------------------------------------------ JetStream, jobs, projections, webhooks
export const consumerPending = new Gauge({ name: "stt_consumer_pending_messages", help: "Messages not yet delivered to a durable consumer (its lag).", labelNames: ["stream", "durable"], registers: [registry] });
export const consumerAckPending = new Gauge({ name: "stt_consumer_ack_pending_messages", help: "Messages delivered to a durable consumer and not yet acknowledged.", labelNames: ["stream", "durable"], registers: [registry] });
export const jobsByStatus = new Gauge({ name: "stt_jobs", help: "Jobs in the read model by status.", labelNames: ["status"], registers: [registry] });
export const jobSteps = new Counter({ name: "stt_job_steps_total", help: "Job step attempts finished, by step and outcome (ack, retry, terminate).", labelNames: ["step", "outcome"], registers: [registry] });
export const jobStepDuration = new Histogram({ name: "stt_job_step_duration_seconds", help: "Job step attempt duration by step.", labelNames: ["step"], buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300], registers: [registry] });
export const projectionLag = new Gauge({ name: "stt_projection_lag_events", help: "Events in a projection's stream after the last one it applied.", labelNames: ["projection"], registers: [registry] });
export const webhookDeliveries = new Counter({ name: "stt_webhook_deliveries_total", help: "Webhook delivery attempts by outcome (delivered, retry, gave_up, refused).", labelNames: ["outcome"], registers: [registry] });

// ------------------------------------------------------------------ NATS client (shared/nats-patches.ts)
export const natsPatchActive = new Gauge({
  name: "stt_nats_patch_active",
  help: "Patches of nats.js internals: 1 installed, 0 left out because the internals it needs were not found (parser: a message spanning socket reads gets one buffer of its size; writer: large payloads written in place).",
  labelNames: ["patch"],
  registers: [registry],
});
export const natsPatchRuns = new Counter({
  name: "stt_nats_patch_runs_total",
  help: "Times a patch's own path ran (parser: a spanning message given one whole buffer; writer: a flush that wrote large payloads in place).",
  labelNames: ["patch"],
  registers: [registry],
});

/** Read at scrape time (consumer lag, job states, projection lag, workers); errors leave the last values. */
type ScrapeCollector = () => Promise<void>;
const collectors = new Set<ScrapeCollector>();

export function addScrapeCollector(collect: ScrapeCollector): () => void {
  collectors.add(collect);
  return () => collectors.delete(collect);
}

/** The registry's text exposition, after the scrape-time collectors ran (each bounded to 2 s). */
export async function renderMetrics(): Promise<{ contentType: string; body: string }> {
  await Promise.all([...collectors].map((c) => Promise.race([c().catch(() => undefined), new Promise((r) => setTimeout(r, 2000).unref())])));
  return { contentType: registry.contentType, body: await registry.metrics() };
}

/** `/metrics` on its own port, for a process that serves no HTTP. */
export function serveMetrics(port: number, host: string): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.method !== "GET" || (req.url ?? "").split("?")[0] !== "/metrics") {
      res.writeHead(404).end();
      return;
    }
    renderMetrics().then(
      ({ contentType, body }) => res.writeHead(200, { "content-type": contentType }).end(body),
      () => res.writeHead(500).end(),
    );
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve(server));
  });
}
