import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Span } from "@opentelemetry/api";
import { NodeSDK } from "@opentelemetry/sdk-node";
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";
import type { Config } from "./config";

/**
 * OpenTelemetry: when OTEL_EXPORTER_OTLP_ENDPOINT is set, the Node SDK exports traces
 * over OTLP (the SDK reads the standard OTEL_* variables). Without it, the API is a
 * no-op and costs nothing. Trace context crosses NATS in message headers
 * (`traceparent`), so a job's steps join the trace of the request that submitted it.
 *
 * One trace per HTTP request, job and realtime utterance, across every hop:
 * - HTTP: a server span per request (services/http-gateway/app.ts); a job's events and
 *   step commands carry it on, so the whole job is one trace;
 * - JetStream: events (shared/event-store.ts), step commands and transcribe commands
 *   carry `traceparent`; every consumer (shared/consumer.ts) and projection
 *   (shared/projection.ts) handles a message in a span continuing it;
 * - workers: the router's NATS request carries it, the worker answers in a child span;
 * - realtime: the VAD starts a root span when it commits an utterance; the transcribe
 *   command (or the streamed decoder's end), the transcriber, the worker, the transcript
 *   events and the gateway's delivery to the socket continue it.
 */
let sdk: NodeSDK | undefined;

export async function startTelemetry(config: Config["telemetry"]): Promise<void> {
  if (!config.otlpEndpoint || sdk) return;
  sdk = new NodeSDK({ serviceName: config.serviceName });
  sdk.start();
}

export async function stopTelemetry(): Promise<void> {
  await sdk?.shutdown().catch(() => undefined);
  sdk = undefined;
}

export const tracer = trace.getTracer("stt");

/** Writes the active trace context into NATS headers. */
export function injectTraceContext(headers: MsgHdrs): void {
  propagation.inject(context.active(), headers, { set: (h, k, v) => h.set(k, String(v)) });
}

/** Runs `fn` in a span that continues the trace carried by NATS headers (if any). */
export async function withSpanFromHeaders<T>(name: string, headers: MsgHdrs | undefined, fn: (span: Span) => Promise<T>): Promise<T> {
  const parent = headers
    ? propagation.extract(context.active(), headers, { get: (h, k) => h.get(k) || undefined, keys: (h) => h.keys() })
    : context.active();
  return context.with(parent, () =>
    tracer.startActiveSpan(name, async (span) => {
      try {
        return await fn(span);
      } finally {
        span.end();
      }
    }),
  );
}

/** Runs `fn` in a new span, a child of the active one (or a root with `root: true`). */
export async function withSpan<T>(name: string, options: { attributes?: Attributes; kind?: SpanKind; root?: boolean }, fn: (span: Span) => Promise<T>): Promise<T> {
  const parent = options.root ? ROOT_CONTEXT : context.active();
  return context.with(parent, () =>
    tracer.startActiveSpan(name, { attributes: options.attributes, kind: options.kind }, async (span) => {
      try {
        return await fn(span);
      } catch (err) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
        throw err;
      } finally {
        span.end();
      }
    }),
  );
}

/** NATS headers carrying the active trace context (for requests and commands). */
export function traceHeaders(h: MsgHdrs = natsHeaders()): MsgHdrs {
  injectTraceContext(h);
  return h;
}

export { SpanKind, SpanStatusCode };
