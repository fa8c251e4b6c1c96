import { context, propagation, trace, type Span } from "@opentelemetry/api";
import { NodeSDK } from "@opentelemetry/sdk-node";
import type { MsgHdrs } from "@nats-io/transport-node";
import type { Config } from "./config";

/**
 * OpenTelemetry: when OTEL_EXPORTER_OTLP_ENDPOINT is set, the Node SDK exports traces
 * over OTLP (the SDK reads the standard OTEL_* variables). Without it, the API is a
 * no-op and costs nothing. Trace context crosses NATS in message headers
 * (`traceparent`), so a job's steps join the trace of the request that submitted it.
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
