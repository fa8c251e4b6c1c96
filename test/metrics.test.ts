import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { startStack, type Stack } from "./support/stack";
import { serveAudio, submitJob, waitFor, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { fixturePath } from "./support/fixtures";
import { connectRt, fixture, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startRuntime } from "../services/stt/runtime";
import { createLogger } from "../shared/logger";

// /metrics on the real stack: counters move by what was done (deltas: the registry is
// per process and other stacks in this file share it).
const JFK = readFileSync(fixturePath("jfk.wav"));
let stack: Stack;
let key: string;
let audioServer: LocalHttp;

beforeAll(async () => {
  stack = await startStack();
  ({ key } = await stack.issueKey("pro", "metrics"));
  audioServer = await serveAudio(JFK);
}, 60_000);

afterAll(async () => {
  await audioServer?.stop();
  await stack?.stop();
});

type Samples = Map<string, number>;

/** Parses the text exposition into `name{labels}` → value (labels as written, sorted). */
function parse(text: string): Samples {
  const out: Samples = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) continue;
    const labels = (m[3] ?? "").match(/\w+="(?:[^"\\]|\\.)*"/g)?.sort().join(",") ?? "";
    out.set(labels ? `${m[1]}{${labels}}` : m[1]!, Number(m[4]));
  }
  return out;
}

async function scrape(url = `${stack.baseUrl}/metrics`): Promise<Samples> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
  return parse(await res.text());
}

const get = (s: Samples, name: string, labels: Record<string, string> = {}) => {
  const l = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(",");
  return s.get(l ? `${name}{${l}}` : name) ?? 0;
};

describe("/metrics", () => {
  it("HTTP requests per route pattern and status, and transcriptions per engine", async () => {
    const before = await scrape();
    for (let i = 0; i < 2; i++) expect((await stack.fetch("/health")).status).toBe(200);
    expect((await stack.fetch("/v1/audio/transcriptions/jobs/not-a-uuid", { headers: { authorization: `Bearer ${key}` } })).status).toBe(404);
    const form = new FormData();
    form.append("file", new Blob([JFK], { type: "audio/wav" }), "jfk.wav");
    form.append("model", "stt-large-v3-turbo");
    const transcribed = await stack.fetch("/v1/audio/transcriptions", { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form });
    expect(transcribed.status).toBe(200);
    // jfk.wav (11 s) is decoded in pieces on two engine processes: the router counts each
    const pieces = Number(transcribed.headers.get("x-segment-pieces"));
    expect(pieces).toBeGreaterThanOrEqual(1);
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) => get(after, name, labels) - get(before, name, labels);
    expect(delta("stt_http_requests_total", { method: "GET", route: "/health", status: "200" })).toBe(2);
    expect(delta("stt_http_requests_total", { method: "POST", route: "/v1/audio/transcriptions", status: "200" })).toBe(1);
    expect(delta("stt_http_request_duration_seconds_count", { method: "POST", route: "/v1/audio/transcriptions", status: "200" })).toBe(1);
    // a path is never a label: the 404 counts under its route pattern
    expect([...after.keys()].some((k) => k.includes("not-a-uuid"))).toBe(false);
    expect(delta("stt_transcriptions_total", { outcome: "ok", code: "" })).toBe(pieces);
    expect(delta("stt_transcription_duration_seconds_count", { engine: "pocketsphinx" })).toBe(pieces);
    expect(get(after, "stt_workers", { kind: "pocketsphinx", state: "warm" })).toBeGreaterThanOrEqual(1);
    expect(get(after, "stt_workers_capacity", { kind: "pocketsphinx" })).toBeGreaterThanOrEqual(1);
    // process metrics from prom-client's defaults
    expect(get(after, "process_resident_memory_bytes")).toBeGreaterThan(0);
  }, 60_000);

  it("realtime: sessions, frames and bytes, close codes, VAD decision, final latency and transcripts", async () => {
    const before = await scrape();
    const rt = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await rt.next("session.created");
    const pcm = new Int16Array([...fixture("jfk.wav"), ...silence(1.5)]);
    await streamPcm(rt, pcm, { speed: 4, chunkBytes: 3200 });
    await rt.next("conversation.item.input_audio_transcription.completed");
    rt.sendJson({ type: "session.close" });
    expect((await rt.closed).code).toBe(1000);
    const after = await waitFor(async () => {
      const s = await scrape();
      return get(s, "stt_realtime_session_closes_total", { code: "1000" }) > get(before, "stt_realtime_session_closes_total", { code: "1000" }) ? s : undefined;
    }, { what: "the close counted" });
    const delta = (name: string, labels: Record<string, string> = {}) => get(after, name, labels) - get(before, name, labels);
    const events = rt.events.map((e: { type: string }) => e.type);
    const count = (t: string) => events.filter((x: string) => x === t).length;
    expect(delta("stt_realtime_sessions_opened_total")).toBe(1);
    expect(delta("stt_realtime_session_closes_total", { code: "1000" })).toBe(1);
    expect(get(after, "stt_realtime_sessions_open")).toBe(get(before, "stt_realtime_sessions_open"));
    expect(delta("stt_realtime_audio_bytes_total")).toBe(pcm.byteLength);
    expect(delta("stt_realtime_audio_frames_total")).toBe(Math.ceil(pcm.byteLength / 3200));
    expect(delta("stt_realtime_vad_decision_seconds_count")).toBe(count("input_audio_buffer.speech_stopped"));
    expect(delta("stt_realtime_final_seconds_count")).toBe(count("conversation.item.input_audio_transcription.completed"));
    expect(delta("stt_realtime_transcripts_total", { outcome: "completed" })).toBe(count("conversation.item.input_audio_transcription.completed"));
    expect(count("conversation.item.input_audio_transcription.completed")).toBeGreaterThanOrEqual(1);
  }, 60_000);

  it("jobs: states, step attempts and durations, consumer and projection lag", async () => {
    const job = await submitJob(stack.fetch, key, { audio_url: `${audioServer.url}/jfk.wav` });
    expect(job.status).toBe(202);
    expect((await waitForJobEnd(stack.fetch, key, job.workflowId, { timeoutMs: 120_000 })).status).toBe("complete");
    const s = await scrape();
    expect(get(s, "stt_jobs", { status: "complete" })).toBeGreaterThanOrEqual(1);
    for (const step of ["fetch", "slice", "transcribe", "aggregate"]) {
      expect(get(s, "stt_job_steps_total", { step, outcome: "ack" }), step).toBeGreaterThanOrEqual(1);
      expect(get(s, "stt_job_step_duration_seconds_count", { step }), step).toBeGreaterThanOrEqual(1);
    }
    // every durable of this stack's streams, by name; the job's commands are all consumed
    const pending = [...s.entries()].filter(([k]) => k.startsWith("stt_consumer_pending_messages{") && k.includes(`stream="${stack.config.nats.prefix.toUpperCase()}_`));
    for (const durable of ["jobs-fetch", "jobs-slice", "jobs-transcribe", "jobs-aggregate", "rt_transcriber"]) {
      const entry = pending.find(([k]) => k.includes(`durable="${durable}"`));
      expect(entry, durable).toBeDefined();
      expect(entry![1], durable).toBe(0);
    }
    expect(s.has('stt_projection_lag_events{projection="jobs"}')).toBe(true);
  }, 150_000);

  it("a process without the HTTP gateway serves /metrics on METRICS_PORT", async () => {
    const config = { ...stack.config, services: ["webhooks"], http: { ...stack.config.http, metricsPort: 0 } };
    const runtime = await startRuntime(config, createLogger("error"));
    try {
      const port = runtime.ctx.slots.metricsPort;
      expect(port).toBeGreaterThan(0);
      const s = await scrape(`http://127.0.0.1:${port}/metrics`);
      expect(s.has('stt_projection_lag_events{projection="jobs"}')).toBe(true);
      expect((await fetch(`http://127.0.0.1:${port}/other`)).status).toBe(404);
    } finally {
      await runtime.stop();
    }
  }, 60_000);
});
