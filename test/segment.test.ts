import { execFileSync } from "node:child_process";
import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { segmentEnvelope } from "../schemas/segment";
import { encodeWav } from "../shared/audio/wav";
import { wordErrorRate } from "../shared/workers/wer";
import { startStack, type Stack } from "./support/stack";
import { FIXTURES_DIR } from "./support/fixtures";

const FIX = FIXTURES_DIR;
const MAX_UPLOAD = 2_000_000;

describe("POST /v1/audio/transcriptions with the embedded PocketSphinx worker", () => {
  let stack: Stack;
  let pro: { key: string; id: string };
  let free: { key: string; id: string };

  beforeAll(async () => {
    stack = await startStack({ SEGMENT_MAX_UPLOAD_BYTES: String(MAX_UPLOAD), POCKETSPHINX_PROCESSES: "2" });
    pro = await stack.issueKey("pro", "tenant-seg");
    free = await stack.issueKey("free", "tenant-seg-free");
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const post = (form: FormData | undefined, key = pro.key, init: RequestInit = {}) =>
    stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, ...init, headers: { authorization: `Bearer ${key}`, ...(init.headers ?? {}) } });
  const formWith = (bytes: Uint8Array, name: string, fields: Record<string, string> = {}) => {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(bytes)]), name);
    for (const [k, v] of Object.entries(fields)) form.set(k, v);
    return form;
  };

  it("401 without a key or with an unknown key, in the OpenAI envelope", async () => {
    const none = await stack.fetch("/v1/audio/transcriptions", { method: "POST", body: formWith(new Uint8Array(0), "a.wav") });
    expect(none.status).toBe(401);
    expect(((await none.json()) as any).error).toMatchObject({ type: expect.any(String), message: expect.any(String) });
    const bad = await post(formWith(new Uint8Array(0), "a.wav"), "sk-0000000000000000000000");
    expect(bad.status).toBe(401);
  });

  it("400 invalid_content_type for a non-multipart, non-JSON body; 400 missing_file without a file", async () => {
    const res = await post(undefined, pro.key, { body: "hello", headers: { "content-type": "text/plain" } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: "invalid_content_type", type: "invalid_request_error" } });
    const form = new FormData();
    form.set("model", "stt-1");
    const missing = await post(form);
    expect(missing.status).toBe(400);
    expect(await missing.json()).toMatchObject({ error: { code: "missing_file", type: "invalid_request_error" } });
    const badFormat = await post(formWith(await readFile(`${FIX}/ldc93s1.wav`), "a.wav", { response_format: "xml" }));
    expect(badFormat.status).toBe(400);
    expect(await badFormat.json()).toMatchObject({ error: { code: "invalid_response_format" } });
  });

  it("verbose_json: real text, segments and words with times inside the clip, headers, usage and audit event", async () => {
    const res = await post(formWith(await readFile(`${FIX}/ldc93s1.wav`), "ldc93s1.wav"));
    expect(res.status).toBe(200);
    expect(res.headers.get("x-worker-id")).toMatch(/^pocketsphinx-/);
    expect(res.headers.get("x-fallback-used")).toBe("0");
    const body = (await res.json()) as any;
    expect(Object.keys(body).sort()).toEqual(["duration", "language", "segments", "task", "text", "words"]);
    expect(body.duration).toBeCloseTo(2.925, 2);
    const wer = wordErrorRate("She had your dark suit in greasy wash water all year.", body.text).wer;
    console.log(`ldc93s1 over HTTP: WER ${(wer * 100).toFixed(1)}%: ${body.text}`);
    expect(wer).toBeLessThan(0.8);
    expect(body.segments[0]).toMatchObject({ id: 0, seek: 0, start: expect.any(Number), end: expect.any(Number), text: expect.any(String), tokens: [], temperature: 0 });
    let last = 0;
    for (const w of body.words) {
      expect(w.start).toBeGreaterThanOrEqual(last);
      expect(w.end).toBeLessThanOrEqual(body.duration + 0.01);
      last = w.start;
    }
    const requestId = res.headers.get("x-request-id")!;
    // audit event
    const { streams, subjects } = stack.nats.topology;
    const msg = await stack.nats.jsm.streams.getMessage(streams.segments.name, { last_by_subj: subjects.segmentEvent(pro.id) });
    const event = segmentEnvelope.parse(msg!.json());
    expect(event).toMatchObject({ type: "SegmentTranscribed", data: { requestId, keyId: pro.id, ownerId: "tenant-seg", fallbackUsed: false } });
    expect(event.metadata.eventId).toBe(`${requestId}:SegmentTranscribed`);
    expect(event.data.audioSeconds).toBeCloseTo(2.925, 2);
    // usage read model, via the projection
    const until = Date.now() + 10_000;
    let seconds = 0;
    while (Date.now() < until) {
      const row = await stack.db.selectFrom("usage_windows").select("audio_seconds").where("key_id", "=", pro.id).executeTakeFirst();
      seconds = row ? Number(row.audio_seconds) : 0;
      if (seconds > 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(seconds).toBeGreaterThanOrEqual(2.9);
  });

  it("json, text, srt and vtt as OpenAI serves them", async () => {
    const bytes = await readFile(`${FIX}/ldc93s1.wav`);
    const json = await post(formWith(bytes, "a.wav", { response_format: "json" }));
    const jb = (await json.json()) as any;
    expect(typeof jb.text).toBe("string");
    expect(jb.text.length).toBeGreaterThan(5);
    expect(jb.segments).toBeUndefined();
    const text = await post(formWith(bytes, "a.wav", { response_format: "text" }));
    expect(text.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(await text.text()).toBe(`${jb.text}\n`);
    const srt = await (await post(formWith(bytes, "a.wav", { response_format: "srt" }))).text();
    expect(srt).toMatch(/^1\n00:00:00,\d{3} --> 00:00:0\d,\d{3}\n\S.*\n\n/);
    const vtt = await post(formWith(bytes, "a.wav", { response_format: "vtt" }));
    expect(vtt.headers.get("content-type")).toMatch(/^text\/vtt/);
    expect(await vtt.text()).toMatch(/^WEBVTT\n\n00:00:00\.\d{3} --> 00:00:0\d\.\d{3}\n\S.*\n\n/);
  });

  it("decodes MP3 (and FLAC) uploads", async () => {
    const mp3 = await post(formWith(await readFile(`${FIX}/jfk.mp3`), "jfk.mp3"));
    expect(mp3.status).toBe(200);
    const body = (await mp3.json()) as any;
    expect(body.duration).toBeGreaterThan(10.9);
    expect(body.words.length).toBeGreaterThan(8);
    const flac = execFileSync("ffmpeg", ["-v", "error", "-i", `${FIX}/ldc93s1.wav`, "-f", "flac", "pipe:1"]);
    const fr = await post(formWith(flac, "clip.flac", { response_format: "json" }));
    expect(fr.status).toBe(200);
  });

  it("silence and an empty file are transcribed (and billed), not rejected", async () => {
    const silence = await post(formWith(encodeWav(new Int16Array(16_000)), "silence.wav"));
    expect(silence.status).toBe(200);
    expect((await silence.json()) as any).toMatchObject({ duration: 1 });
    const empty = await post(formWith(new Uint8Array(0), "empty.wav"));
    expect(empty.status).toBe(200);
    expect(await empty.json()).toMatchObject({ text: "", duration: 0, segments: [], words: [] });
  });

  it("415 for a file that is not audio, 413 for an oversize upload, 413 for a clip over the plan's limit", async () => {
    const notAudio = await post(formWith(new TextEncoder().encode("definitely not audio ".repeat(50)), "notes.txt"));
    expect(notAudio.status).toBe(415);
    expect(await notAudio.json()).toMatchObject({ error: { code: "unsupported_audio", type: "invalid_request_error" } });

    const big = await post(formWith(new Uint8Array(MAX_UPLOAD + 1000), "big.wav"));
    expect(big.status).toBe(413);
    expect(await big.json()).toMatchObject({ error: { code: "file_too_large" } });

    // 905 s of near-silence as an 8 kbps MP3: under the byte limit, over free's 900 s.
    const long = execFileSync("ffmpeg", ["-v", "error", "-f", "lavfi", "-i", "anullsrc=r=8000:cl=mono", "-t", "905", "-b:a", "8k", "-f", "mp3", "pipe:1"], { maxBuffer: 1 << 24 });
    expect(long.length).toBeLessThan(MAX_UPLOAD);
    const tooLong = await post(formWith(long, "long.mp3"), free.key);
    expect(tooLong.status).toBe(413);
    const err = (await tooLong.json()) as any;
    expect(err.error.code).toBe("audio_too_long");
    expect(err.error.message).toMatch(/900 s/);
    // the failure is audited
    const { streams, subjects } = stack.nats.topology;
    const msg = await stack.nats.jsm.streams.getMessage(streams.segments.name, { last_by_subj: subjects.segmentEvent(free.id) });
    expect(segmentEnvelope.parse(msg!.json())).toMatchObject({ type: "SegmentFailed", data: { code: "audio_too_long" } });
  });

  it("429 audio_quota_exhausted when the key's billing window is used up", async () => {
    const spent = await stack.issueKey("free", "tenant-seg-spent");
    await stack.runtime.ctx.usage.record({
      keyId: spent.id,
      ownerId: "tenant-seg-spent",
      plane: "realtime",
      audioSeconds: 3600,
      requests: 1,
      subjectId: "sess_test",
      part: 0,
      at: new Date(),
    });
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      const row = await stack.db.selectFrom("usage_windows").select("audio_seconds").where("key_id", "=", spent.id).executeTakeFirst();
      if (row && Number(row.audio_seconds) >= 3600) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const res = await post(formWith(encodeWav(new Int16Array(1600)), "a.wav"), spent.key);
    expect(res.status).toBe(429);
    expect(await res.json()).toMatchObject({ error: { code: "audio_quota_exhausted" } });
  });

  it("a JSON body is the deprecated job submission: 202 with Deprecation and a Link to /jobs", async () => {
    const res = await post(undefined, pro.key, {
      body: JSON.stringify({ audio_url: "https://example.invalid/clip.wav" }),
      headers: { "content-type": "application/json" },
    });
    expect(res.status).toBe(202);
    expect(res.headers.get("deprecation")).toBe("true");
    expect(res.headers.get("link")).toMatch(/<\/v1\/audio\/transcriptions\/jobs>/);
    expect(await res.json()).toMatchObject({ status: "queued", workflow_id: expect.any(String), request_id: expect.any(String) });
    const bad = await post(undefined, pro.key, { body: JSON.stringify({ nope: 1 }), headers: { "content-type": "application/json" } });
    expect(bad.status).toBe(400);
  });

  it("worker_id pins the embedded worker; an unknown id without a fallback is 502 transcription_failed", async () => {
    const workers = (stack.runtime.ctx.router as any).workers() as { id: string }[];
    const id = workers[0]!.id;
    const pinned = await post(formWith(await readFile(`${FIX}/ldc93s1.wav`), "a.wav", { worker_id: id, response_format: "json" }));
    expect(pinned.headers.get("x-worker-id")).toBe(id);
    const unknown = await post(formWith(await readFile(`${FIX}/ldc93s1.wav`), "a.wav", { worker_id: "nobody" }));
    expect(unknown.status).toBe(502);
    const body = (await unknown.json()) as any;
    expect(body.error).toMatchObject({ code: "transcription_failed", type: "invalid_request_error" });
    expect(body.error.message).toMatch(/\d+ ms/);
  });
});
