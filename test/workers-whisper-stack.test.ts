import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chunkArtifact } from "../schemas/jobs";
import { serverEvent } from "../schemas/realtime";
import { checkWhisperModelFile, type WhisperModelInfo } from "../services/transcriber/whisper-model-file";
import type { RunningRouter } from "../shared/workers/router";
import { fixturePath } from "./support/fixtures";
import { serveAudio, submitJob, waitFor, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { connectRt, fixture, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { expectWellFormedTranscript } from "./support/whisper-transcript";
import { expectNoWordsFromNoise } from "./support/noise";
import { writeTinyWhisperModel } from "./support/workers-whisper-model";

/**
 * The whole service with whisper.cpp as its only engine, configured as an operator
 * does it (WHISPER_MODEL_PATH, WORKER_EMBEDDED=none, no fallback provider), on a
 * multilingual model the test writes (test/support/workers-whisper-model.ts): the
 * segment route in every response format, a batch job, realtime sessions (the final on
 * the commit path; partials from re-decodes of the open item, services/vad/redecode.ts),
 * and an engine error without a
 * fallback. The words are nonsense; their shape, timings and routing are what is
 * checked. The frozen worker, the fallback and start-up errors are in
 * workers-whisper-process.test.ts.
 */
const WORKER = "wh-whisper-cpp";

let dir: string;
let model: WhisperModelInfo;
let stack: Stack;
let key: string;
let jfk: Buffer;
let audio: LocalHttp | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "whisper-stack-"));
  const written = await writeTinyWhisperModel(join(dir, "ggml-tiny-random.bin"), { multilingual: true });
  model = await checkWhisperModelFile(written.path);
  stack = await startStack({
    WORKER_EMBEDDED: "none",
    WHISPER_MODEL_PATH: written.path,
    WORKER_ID: "wh",
    // two clips at once over the one model
    WHISPER_PARALLEL: "2",
    // the router's per-attempt timeout follows the declared factor: room for the test
    // model's decodes on a machine busy with the rest of the suite (this file checks
    // shapes and paths, not speed)
    WHISPER_REAL_TIME_FACTOR: "4",
    // let a session's wait for an engine outlast a busy machine instead of failing items as overloaded
    RT_MAX_TRANSCRIPT_WAIT_MS: "60000",
  });
  key = (await stack.issueKey("pro", "tenant-whisper")).key;
  jfk = await readFile(fixturePath("jfk.wav"));
});
afterAll(async () => {
  await audio?.stop();
  await stack?.stop();
  await rm(dir, { recursive: true, force: true });
});

const post = (fields: Record<string, string>, bytes: Uint8Array = jfk) => {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(bytes)]), "jfk.wav");
  for (const [k, v] of Object.entries(fields)) form.set(k, v);
  return stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
};

/** SRT or VTT cues: numbered (SRT) from 1, times in order and inside the 11 s clip. */
function expectCues(body: string, separator: "," | "."): void {
  const clock = `(\\d{2}):(\\d{2}):(\\d{2})\\${separator}(\\d{3})`;
  const cue = new RegExp(`${separator === "," ? "(\\d+)\\n" : "()"}${clock} --> ${clock}\\n([^\\n]*)\\n\\n`, "gy");
  const seconds = (m: RegExpExecArray, at: number) => Number(m[at]) * 3600 + Number(m[at + 1]) * 60 + Number(m[at + 2]) + Number(m[at + 3]) / 1000;
  let last = 0;
  let n = 0;
  let consumed = 0;
  let m: RegExpExecArray | null;
  while ((m = cue.exec(body))) {
    n++;
    consumed += m[0].length;
    if (separator === ",") expect(Number(m[1])).toBe(n);
    const [start, end] = [seconds(m, 2), seconds(m, 6)];
    expect(start).toBeGreaterThanOrEqual(last);
    expect(end).toBeGreaterThanOrEqual(start);
    expect(end).toBeLessThanOrEqual(11);
    last = start;
  }
  // nothing but cues
  expect(consumed).toBe(body.length);
}

describe("the service with whisper.cpp as its engine", () => {
  it("starts the engine from WHISPER_MODEL_PATH and announces it: warm, two clips at a time (WHISPER_PARALLEL), every language, its own formatting", async () => {
    const router = stack.runtime.ctx.router as RunningRouter;
    await waitFor(async () => router.workers().find((w) => w.id === WORKER && w.warm), { timeoutMs: 10_000, what: "the whisper worker warm" });
    expect(router.workers().find((w) => w.id === WORKER)).toMatchObject({ kind: "whisper-cpp", warm: true, concurrency: 2, languages: ["*"], formatsText: true, models: ["stt-1", "whisper-1", "stt-large-v3-turbo"] });
    expect(router.workers().map((w) => w.id)).toEqual([WORKER]);
    // realtime sessions stream by re-decoding the open item; whisper transcribes the committed one whole
    expect(stack.config.realtime).toMatchObject({ streaming: true, partials: "redecode" });
    const ready = await stack.fetch("/readyz");
    expect(ready.status).toBe(200);
  });

  it("POST /v1/audio/transcriptions answers in every response format with the documented shapes", async () => {
    const verbose = await post({ response_format: "verbose_json", language: "en", prompt: "Ask not what your country can do for you." });
    expect(verbose.status, verbose.status === 200 ? "" : await verbose.clone().text()).toBe(200);
    expect(verbose.headers.get("x-worker-id")).toBe(WORKER);
    expect(verbose.headers.get("x-fallback-used")).toBe("0");
    expect(verbose.headers.get("server-timing")).toMatch(/worker;dur=/);
    const body = (await verbose.json()) as any;
    expect(Object.keys(body).sort()).toEqual(["duration", "language", "segments", "task", "text", "words"]);
    expectWellFormedTranscript(body, 11);
    // the hint's language (without one the model detects it: the batch job and the realtime session below)
    expect(body.language).toBe("en");
    console.log(`verbose_json: ${body.words.length} words, ${body.segments.length} segments: ${body.text}`);

    const json = await post({ response_format: "json" });
    expect(json.headers.get("content-type")).toMatch(/^application\/json/);
    const jb = (await json.json()) as any;
    expect(Object.keys(jb).sort()).toEqual(["text", "usage"]);
    expect(jb.usage).toEqual({ type: "duration", seconds: 11 });
    expect(typeof jb.text).toBe("string");

    const text = await post({ response_format: "text" });
    expect(text.headers.get("content-type")).toMatch(/^text\/plain/);
    const tb = await text.text();
    expect(tb.endsWith("\n")).toBe(true);
    expect(tb.slice(0, -1)).not.toMatch(/\n/);

    const srt = await post({ response_format: "srt" });
    expect(srt.headers.get("content-type")).toMatch(/^text\/plain/);
    expectCues(await srt.text(), ",");

    const vtt = await post({ response_format: "vtt" });
    expect(vtt.headers.get("content-type")).toMatch(/^text\/vtt/);
    const vb = await vtt.text();
    expect(vb.startsWith("WEBVTT\n\n")).toBe(true);
    expectCues(vb.slice("WEBVTT\n\n".length), ".");
  });

  it("a language whisper.cpp does not know is the engine's error: 502 after one attempt without a fallback, and the worker goes on", async () => {
    const res = await post({ response_format: "json", language: "xx" });
    expect(res.status).toBe(502);
    const { error } = (await res.json()) as any;
    expect(error).toMatchObject({ code: "transcription_failed", type: "invalid_request_error" });
    expect(error.message).toContain(`worker ${WORKER}: whisper.cpp does not know the language "xx"`);
    const next = await post({ response_format: "json", language: "pt-BR" });
    expect(next.status).toBe(200);
    expect(next.headers.get("x-worker-id")).toBe(WORKER);
  });

  it("a batch job completes: every chunk transcribed by whisper, segments in order inside the audio", async () => {
    audio = await serveAudio(jfk);
    const { status, workflowId } = await submitJob(stack.fetch, key, { audio_url: `${audio.url}/jfk.wav`, segment_seconds: 4, request_id: "whisper-job" });
    expect(status).toBe(202);
    const view = await waitForJobEnd(stack.fetch, key, workflowId, { timeoutMs: 90_000 });
    expect(view.error).toBeNull();
    expect(view.status).toBe("complete");
    const result = view.output!.result;
    expect(result.metadata.chunk_count).toBeGreaterThanOrEqual(2);
    expect(result.metadata.audio_duration_seconds).toBeCloseTo(11, 1);
    expect(model.languages).toContain(result.metadata.language);
    let previous = 0;
    for (const [i, s] of result.segments.entries()) {
      expect(s.id).toBe(i);
      expect(s.start_time).toBeGreaterThanOrEqual(previous);
      expect(s.end_time).toBeGreaterThanOrEqual(s.start_time);
      expect(s.end_time).toBeLessThanOrEqual(11.001);
      expect(s.duration).toBeCloseTo(s.end_time - s.start_time, 3);
      expect(s.confidence).toBeGreaterThanOrEqual(0);
      expect(s.confidence).toBeLessThanOrEqual(1);
      previous = s.start_time;
    }
    expect(result.summary.num_segments).toBe(result.segments.length);
    console.log(`batch job: ${result.metadata.chunk_count} chunks, ${result.segments.length} segments: ${result.text}`);
    // each chunk's artifact names the worker that transcribed it
    const folder = `transcription/whisper-job/${workflowId}`;
    for (let i = 0; i < result.metadata.chunk_count; i++) {
      const chunk = chunkArtifact.parse(JSON.parse((await stack.runtime.ctx.objects.get(`${folder}/chunk_${i}.json`))!.toString()));
      expect(chunk.worker_id).toBe(WORKER);
    }
  });

  it("a realtime session completes on the commit path: one transcript per committed utterance, from whisper, words inside it", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    await streamPcm(c, fixture("jfk.wav"), { speed: 4 });
    await streamPcm(c, silence(1.5), { speed: 4 });
    await waitFor(
      async () => {
        const committed = c.events.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
        const done = c.events.filter((e) => e.type.endsWith("transcription.completed") || e.type.endsWith("transcription.failed")).map((e) => e.item_id);
        return committed.length > 0 && committed.every((i) => done.includes(i));
      },
      { timeoutMs: 90_000, what: "a result for every committed utterance" },
    );
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
    for (const e of c.events) serverEvent.parse(e);
    const committed = c.events.filter((e) => e.type === "input_audio_buffer.committed");
    const completed = c.events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed");
    expect(c.events.filter((e) => e.type.endsWith(".failed"))).toEqual([]);
    expect(completed.map((e) => e.item_id).sort()).toEqual(committed.map((e) => e.item_id).sort());
    for (const e of completed) {
      expect(e).toMatchObject({ worker_id: WORKER, fallback_used: false });
      expect(model.languages).toContain(e.language);
      const m = committed.find((x) => x.item_id === e.item_id);
      expect([e.audio_start_ms, e.audio_end_ms]).toEqual([m.audio_start_ms, m.audio_end_ms]);
      expect(e.transcript.split(/\s+/).filter(Boolean)).toEqual(e.words.map((w: any) => w.word));
      let last = e.audio_start_ms;
      for (const w of e.words) {
        expect(w.start_ms).toBeGreaterThanOrEqual(last);
        expect(w.end_ms).toBeGreaterThanOrEqual(w.start_ms);
        expect(w.end_ms).toBeLessThanOrEqual(e.audio_end_ms);
        last = w.start_ms;
      }
      // the commit path: one delta with the whole text before its completed
      const deltas = c.events.filter((x) => x.type.endsWith(".delta") && x.item_id === e.item_id);
      expect(deltas.map((d) => d.delta).join("")).toBe(e.transcript);
    }
    console.log(`realtime: ${completed.length} utterances: ${completed.map((e) => `[${e.audio_start_ms}-${e.audio_end_ms} ms] ${e.transcript}`).join(" | ")}`);
  });

  it("text while speaking: interim hypotheses before speech_stopped on every utterance of 2 s or more, deltas adding up to the final, semantic_vad accepted", { timeout: 120_000 }, async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    const created = await c.next("session.created");
    expect(created.input_audio_transcription.streaming).toBe(true);
    expect(created.turn_detection_types).toEqual(["server_vad", "semantic_vad", "manual"]);
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { interim_results: true } } });
    expect((await c.next("session.updated")).session.input_audio_transcription).toMatchObject({ interim_results: true });
    // one turn at real time (jfk.wav's pauses held inside it: 11 s): a decode of this model
    // costs about 0.6 CPU-s whatever the clip's length, and a second or more on a loaded
    // machine, so re-decodes come every second or two and the interims with them
    c.sendJson({ type: "session.update", session: { turn_detection: { type: "server_vad", silence_duration_ms: 1500 } } });
    await c.next("session.updated");
    await streamPcm(c, fixture("jfk.wav"), { speed: 1, chunkBytes: 640 });
    await streamPcm(c, silence(2), { speed: 1, chunkBytes: 640 });
    await waitFor(
      async () => {
        const committed = c.events.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
        const done = c.events.filter((e) => e.type.endsWith("transcription.completed")).map((e) => e.item_id);
        return committed.length > 0 && committed.every((i) => done.includes(i));
      },
      { timeoutMs: 90_000, what: "a completed item for every committed utterance" },
    );
    const T = "conversation.item.input_audio_transcription";
    const completed = c.events.filter((e) => e.type === `${T}.completed`);
    const long = completed.filter((e) => e.audio_end_ms - e.audio_start_ms >= 2000);
    expect(long.length).toBeGreaterThan(0);
    for (const e of completed) {
      const stopped = c.events.find((x) => x.type === "input_audio_buffer.speech_stopped" && x.item_id === e.item_id);
      const interims = c.events.filter((x) => x.type === `${T}.interim` && x.item_id === e.item_id && x.__t < stopped.__t);
      console.log(`[${e.audio_start_ms}-${e.audio_end_ms} ms] ${interims.length} interims before speech_stopped; final: ${e.transcript}`);
      if (long.includes(e)) expect(interims.length).toBeGreaterThan(0);
      const deltas = c.events.filter((x) => x.type === `${T}.delta` && x.item_id === e.item_id);
      expect(deltas.map((d) => d.delta).join("")).toBe(e.transcript);
    }
    c.sendJson({ type: "session.update", event_id: "u1", session: { turn_detection: { type: "semantic_vad" } } });
    expect((await c.next("session.updated")).session.turn_detection).toMatchObject({ type: "semantic_vad" });
    expect(c.events.filter((e) => e.type === "error")).toEqual([]);
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
  });

  it("no words from silence or noise on any plane: digital silence, white noise and background noise come back empty, and are billed", { timeout: 180_000 }, async () => {
    // the generated model answers anything it hears with words: what reaches it is the gate's to decide
    const heard = await post({ response_format: "json" });
    expect(((await heard.json()) as { text: string }).text.length).toBeGreaterThan(0);
    await expectNoWordsFromNoise(stack, key, "whisper-noise");
  });
});
