import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-node";
import { startStack, type Stack } from "./support/stack";
import { serveAudio, submitJob, waitFor, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { fixturePath } from "./support/fixtures";
import { connectRt, fixture, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { traceFields } from "../shared/logger";
import { tracer } from "../shared/telemetry";

// One trace per HTTP request, job and realtime utterance across every hop, on the real
// stack (NATS, Postgres, the embedded PocketSphinx worker), collected by an in-memory
// exporter registered as the global tracer provider of this test process (the stack
// runs in-process, so its spans land here).
const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register();

const JFK = readFileSync(fixturePath("jfk.wav"));
let stack: Stack;
let key: string;
let audioServer: LocalHttp;

beforeAll(async () => {
  // the commit path (no streaming decoders), so a realtime utterance crosses the transcriber and a worker
  stack = await startStack({ RT_STREAM_DECODERS: "0" });
  ({ key } = await stack.issueKey("pro", "traces"));
  audioServer = await serveAudio(JFK);
}, 60_000);

afterAll(async () => {
  await audioServer?.stop();
  await stack?.stop();
  await provider.shutdown();
});

const spans = () => exporter.getFinishedSpans();
const traceOf = (traceId: string) => spans().filter((s) => s.spanContext().traceId === traceId);
const names = (ss: ReadableSpan[]) => ss.map((s) => s.name);
const parentId = (s: ReadableSpan) => s.parentSpanContext?.spanId;

/** Every span of the trace but its root has its parent in the trace: one tree, no orphans. */
function expectOneTree(trace: ReadableSpan[]) {
  const ids = new Set(trace.map((s) => s.spanContext().spanId));
  const roots = trace.filter((s) => !parentId(s));
  expect(roots.map((s) => s.name)).toHaveLength(1);
  for (const s of trace) if (parentId(s)) expect(ids.has(parentId(s)!), `${s.name}'s parent is in the trace`).toBe(true);
  return roots[0]!;
}

describe("traces across every hop", () => {
  it("log records are mixed with the active span's trace and span ids (traceFields); outside a span, none", async () => {
    expect(traceFields()).toEqual({});
    await tracer.startActiveSpan("log inside", async (span) => {
      expect(traceFields()).toEqual({ trace_id: span.spanContext().traceId, span_id: span.spanContext().spanId });
      span.end();
    });
  });

  it("a segment upload: HTTP → worker request → worker → usage event → projection, one trace", async () => {
    const form = new FormData();
    form.append("file", new Blob([JFK], { type: "audio/wav" }), "jfk.wav");
    form.append("model", "stt-large-v3-turbo");
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form });
    expect(res.status).toBe(200);
    const requestId = res.headers.get("x-request-id");
    const http = await waitFor(async () => spans().find((s) => s.name === "POST /v1/audio/transcriptions" && s.attributes["request.id"] === requestId), { what: "the request's span" });
    expect(http.attributes["http.response.status_code"]).toBe(200);
    const trace = await waitFor(async () => {
      const t = traceOf(http.spanContext().traceId);
      return names(t).includes("projection usage_windows") ? t : undefined;
    }, { what: "the usage projection's span in the request's trace" });
    expect(names(trace)).toEqual(expect.arrayContaining(["POST /v1/audio/transcriptions", "worker request pocketsphinx", "worker pocketsphinx transcribe", "projection usage_windows"]));
    expect(expectOneTree(trace).name).toBe("POST /v1/audio/transcriptions");
    // the worker's span is the child of the router's request span
    const request = trace.find((s) => s.name === "worker request pocketsphinx")!;
    expect(parentId(trace.find((s) => s.name === "worker pocketsphinx transcribe")!)).toBe(request.spanContext().spanId);
  }, 60_000);

  it("a batch job: the submitting request, every step, the worker and the projection, one trace", async () => {
    const job = await submitJob(stack.fetch, key, { audio_url: `${audioServer.url}/jfk.wav` });
    expect(job.status).toBe(202);
    expect((await waitForJobEnd(stack.fetch, key, job.workflowId, { timeoutMs: 120_000 })).status).toBe("complete");
    const http = spans().find((s) => s.name === "POST /v1/audio/transcriptions/jobs" && s.attributes["http.response.status_code"] === 202)!;
    expect(http).toBeDefined();
    const trace = await waitFor(async () => {
      const t = traceOf(http.spanContext().traceId);
      const steps = new Set(names(t).filter((n) => /^jobs-(fetch|slice|transcribe|aggregate) /.test(n)).map((n) => n.split(" ")[0]));
      return steps.size === 4 && names(t).includes("projection jobs") ? t : undefined;
    }, { what: "every step's span in the job's trace" });
    expect(names(trace)).toEqual(expect.arrayContaining(["worker pocketsphinx transcribe", "projection jobs"]));
    expect(names(trace).some((n) => n.startsWith("jobs-manager") || n.includes("process"))).toBe(true);
    expect(expectOneTree(trace).name).toBe("POST /v1/audio/transcriptions/jobs");
    // the job's spans are in no other trace: a second job would have its own
    expect(spans().filter((s) => s.name.startsWith("jobs-fetch") && s.spanContext().traceId !== http.spanContext().traceId)).toHaveLength(0);
  }, 150_000);

  it("a realtime utterance: the VAD's commit → transcribe command → transcriber → worker → transcript to the socket, one trace", async () => {
    const rt = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await rt.next("session.created");
    await streamPcm(rt, fixture("jfk.wav"), { speed: 4, chunkBytes: 3200 });
    await streamPcm(rt, silence(1.5), { speed: 4, chunkBytes: 3200 });
    const completed = await rt.next("conversation.item.input_audio_transcription.completed");
    rt.sendJson({ type: "session.close" });
    await rt.closed;
    const root = await waitFor(async () => spans().find((s) => s.name === "vad utterance" && s.attributes["item.id"] === completed.item_id), { what: "the utterance's span" });
    const trace = await waitFor(async () => {
      const t = traceOf(root.spanContext().traceId);
      return names(t).includes("ws send transcript") ? t : undefined;
    }, { what: "the delivery span in the utterance's trace" });
    expect(names(trace)).toEqual(expect.arrayContaining(["vad utterance", "worker request pocketsphinx", "worker pocketsphinx transcribe", "ws send transcript"]));
    expect(names(trace).some((n) => n.startsWith("rt_transcriber "))).toBe(true);
    expect(expectOneTree(trace).name).toBe("vad utterance");
    expect(trace.find((s) => s.name === "ws send transcript")!.attributes["item.id"]).toBe(completed.item_id);
    // each utterance is its own trace
    const others = spans().filter((s) => s.name === "vad utterance" && s.attributes["session.id"] === root.attributes["session.id"]);
    expect(new Set(others.map((s) => s.spanContext().traceId)).size).toBe(others.length);
  }, 60_000);
});
