import { readFileSync } from "node:fs";
import OpenAI, { toFile } from "openai";
import type { TranscriptionDiarized } from "openai/resources/audio/transcriptions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobView } from "../schemas/jobs";
import { encodeWav, pcm16MonoFromWav } from "../shared/audio/wav";
import { fixturePath } from "./support/fixtures";
import { randomHex, readBody, serveAudio, startHttp, submitJob, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { startStack, type Stack } from "./support/stack";

// Diarization on the real stack (docs/diarization.md): a conversation made from two real
// recordings of different people, JFK (jfk.wav, 11 s), then a TIMIT speaker (ldc93s1.wav,
// 2.9 s), then JFK again, 1 s apart. Speakers are asserted by time range (where each
// recording lies), never by which words the engine heard.
const jfk = pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!;
const ldc = pcm16MonoFromWav(readFileSync(fixturePath("ldc93s1.wav")))!;
const GAP = new Int16Array(16_000);
const parts = [jfk, GAP, ldc, GAP, jfk];
const pcm = new Int16Array(parts.reduce((a, p) => a + p.length, 0));
parts.reduce((at, p) => (pcm.set(p, at), at + p.length), 0);
const CONVERSATION = encodeWav(pcm);
const TIMIT_FROM = (jfk.length + GAP.length) / 16_000;
const TIMIT_TO = TIMIT_FROM + ldc.length / 16_000;
/** Who is speaking at `t` seconds ("jfk" / "timit"), or undefined within 0.3 s of a change. */
const truthAt = (t: number) => {
  if (Math.abs(t - TIMIT_FROM) < 0.3 || Math.abs(t - TIMIT_TO) < 0.3) return undefined;
  return t > TIMIT_FROM && t < TIMIT_TO ? "timit" : "jfk";
};

/** Every word away from a change carries one speaker for JFK and another for the TIMIT speaker. */
function expectSpeakersByTime(items: { start: number; end: number; speaker?: number | string }[]) {
  const seen = new Map<string, Set<number | string | undefined>>([
    ["jfk", new Set()],
    ["timit", new Set()],
  ]);
  for (const w of items) {
    const who = truthAt((w.start + w.end) / 2);
    if (who) seen.get(who)!.add(w.speaker);
  }
  expect(seen.get("jfk")!.size).toBe(1);
  expect(seen.get("timit")!.size).toBe(1);
  const [a] = seen.get("jfk")!;
  const [b] = seen.get("timit")!;
  expect(a).toBeDefined();
  expect(b).toBeDefined();
  expect(a).not.toBe(b);
  return { jfk: a!, timit: b! };
}

let stack: Stack;
let key: string;
let audio: LocalHttp;
let llm: LocalHttp;
const reviewerSaw: Record<string, any>[] = [];

beforeAll(async () => {
  audio = await serveAudio(CONVERSATION);
  // An OpenAI-compatible reviewer that records what it is shown and changes nothing.
  llm = await startHttp(async (req, res) => {
    const body = JSON.parse((await readBody(req)).toString()) as { messages: { content: string }[] };
    const user = JSON.parse(body.messages[1]!.content) as Record<string, any>;
    reviewerSaw.push(user);
    const answer = Array.isArray(user.proposed_corrections) ? { segments: [], notes: "none" } : { corrections: [], notes: "none" };
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "c1", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: JSON.stringify(answer) }, finish_reason: "stop" }] }));
  });
  stack = await startStack({ POCKETSPHINX_PROCESSES: "2", REVIEW_LLM_URL: `${llm.url}/v1`, REVIEW_LLM_API_KEY: "llm-key", REVIEW_LLM_MODEL: "test-reviewer" });
  ({ key } = await stack.issueKey("pro", `tenant-diarize-${randomHex()}`));
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  for (const s of [audio, llm]) await s?.stop();
});

const post = (fields: [string, string][]) => {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(CONVERSATION)], { type: "audio/wav" }), "conversation.wav");
  for (const [k, v] of fields) form.append(k, v);
  return stack.fetch("/v1/audio/transcriptions", { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form });
};

describe("diarize=true on the segment plane", () => {
  it("labels each recording's words with its own speaker and splits segments at the turns", { timeout: 120_000 }, async () => {
    const res = await post([
      ["diarize", "true"],
      ["response_format", "verbose_json"],
    ]);
    expect(res.status).toBe(200);
    const r = (await res.json()) as { words: { start: number; end: number; speaker?: number }[]; segments: { start: number; end: number; speaker?: number; text: string }[] };
    expect(r.words.length).toBeGreaterThan(10);
    const who = expectSpeakersByTime(r.words);
    expect(who.jfk).toBe(0); // numbered by first turn
    // no segment holds words of two speakers; each carries its words' speaker
    for (const s of r.segments) {
      const mine = r.words.filter((w) => w.start >= s.start - 0.01 && w.start < s.end + 0.01);
      expect(new Set(mine.map((w) => w.speaker)).size).toBeLessThanOrEqual(1);
      if (mine.length) expect(s.speaker).toBe(mine[0]!.speaker);
    }
    expectSpeakersByTime(r.segments.filter((s) => s.text.trim()));
  });

  it("without diarize nothing carries a speaker", { timeout: 60_000 }, async () => {
    const r = (await (await post([["response_format", "verbose_json"]])).json()) as { words: object[]; segments: object[] };
    expect([...r.words, ...r.segments].some((x) => "speaker" in x)).toBe(false);
  });

  it("diarized_json in OpenAI's shape, read by the unmodified openai SDK", { timeout: 120_000 }, async () => {
    const client = new OpenAI({ apiKey: key, baseURL: `${stack.baseUrl}/v1`, maxRetries: 0, timeout: 60_000 });
    // the SDK types every format it has no overload for as Transcription
    const r = (await client.audio.transcriptions.create({ file: await toFile(CONVERSATION, "conversation.wav"), model: "stt-1", response_format: "diarized_json" })) as unknown as TranscriptionDiarized;
    expect(r).toMatchObject({ task: "transcribe", text: expect.any(String), usage: { type: "duration", seconds: Math.ceil(pcm.length / 16_000) } });
    expect(r.duration).toBeCloseTo(pcm.length / 16_000, 1);
    expect(r.segments.length).toBeGreaterThan(1);
    for (const s of r.segments) {
      expect(s).toEqual({ type: "transcript.text.segment", id: expect.stringMatching(/^seg_\d+$/), start: expect.any(Number), end: expect.any(Number), speaker: expect.stringMatching(/^[A-Z]$/), text: expect.any(String) });
    }
    expect(expectSpeakersByTime(r.segments.filter((s) => s.text))).toEqual({ jfk: "A", timit: "B" });
  });

  it("SRT and VTT cues name the speaker", { timeout: 120_000 }, async () => {
    const vtt = await (await post([["diarize", "true"], ["response_format", "vtt"]])).text();
    expect(vtt).toMatch(/^WEBVTT/);
    expect(vtt).toContain("<v Speaker A>");
    expect(vtt).toContain("<v Speaker B>");
    const srt = await (await post([["diarize", "true"], ["speakers", "2"], ["response_format", "srt"]])).text();
    expect(srt).toMatch(/\n\[Speaker A\] /);
    expect(srt).toMatch(/\n\[Speaker B\] /);
  });

  it("bad diarization fields are 400 invalid_request naming the field", async () => {
    const cases: [[string, string][], string][] = [
      [[["diarize", "true"], ["speakers", "0"]], "speakers"],
      [[["diarize", "true"], ["speakers", "two"]], "speakers"],
      [[["diarize", "true"], ["max_speakers", "11"]], "max_speakers"],
      [[["speakers", "2"]], "speakers"],
      [[["diarize", "true"], ["min_speakers", "3"], ["max_speakers", "2"]], "min_speakers"],
      [[["diarize", "true"], ["speakers", "2"], ["max_speakers", "3"]], "speakers"],
      [[["diarize", "maybe"]], "diarize"],
    ];
    for (const [fields, param] of cases) {
      const res = await post(fields);
      expect(res.status, JSON.stringify(fields)).toBe(400);
      expect(((await res.json()) as { error: object }).error).toMatchObject({ code: "invalid_request", param });
    }
    for (const [fields, param] of [
      [[["response_format", "diarized_json"], ["stream", "true"]], "stream"],
      [[["diarize", "true"], ["multichannel", "true"]], "diarize"],
    ] as [[string, string][], string][]) {
      const res = await post(fields);
      expect(res.status, JSON.stringify(fields)).toBe(400);
      expect(((await res.json()) as { error: object }).error).toMatchObject({ code: "unsupported_combination", param });
    }
  });
});

describe("diarize in a batch job", () => {
  it("segments carry speaker and the role metadata.speaker_roles names, one speaker numbering across slices; the reviewer sees both", { timeout: 240_000 }, async () => {
    const metadata = { speaker_roles: { "0": "agent", "1": "customer" } };
    // 8 s slices: JFK speaks in the first and the last, the TIMIT speaker in between
    const { status, workflowId } = await submitJob(stack.fetch, key, { audio_url: `${audio.url}/call.wav`, diarize: true, review: true, metadata, segment_seconds: 8, concurrency: 2 });
    expect(status).toBe(202);
    const view: JobView = await waitForJobEnd(stack.fetch, key, workflowId, { timeoutMs: 200_000 });
    expect(view.status).toBe("complete");
    expect(view.output!.result.metadata.chunk_count).toBeGreaterThanOrEqual(3);
    const segments = view.output!.result.segments.filter((s) => s.text.trim());
    const who = expectSpeakersByTime(segments.map((s) => ({ start: s.start_time, end: s.end_time, speaker: s.speaker_role })));
    expect(who).toEqual({ jfk: "agent", timit: "customer" });
    expect(segments.every((s) => (s.speaker === 0 ? s.speaker_role === "agent" : s.speaker_role === "customer"))).toBe(true);
    expect(view.output!.reviewed_result!.segments.filter((s) => s.text.trim()).map((s) => s.speaker_role)).toEqual(segments.map((s) => s.speaker_role));
    const sliceReviews = reviewerSaw.filter((u) => Array.isArray(u.segments) && u.segments.some((s: any) => "segment_id" in s));
    expect(sliceReviews.length).toBeGreaterThanOrEqual(3);
    for (const u of sliceReviews) expect(u.metadata).toEqual(metadata);
    expect(new Set(sliceReviews.flatMap((u) => u.segments.map((s: any) => s.speaker_role)))).toEqual(new Set(["agent", "customer"]));

    const bad = await stack.fetch("/v1/audio/transcriptions/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ audio_url: `${audio.url}/call.wav`, speakers: 2 }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: object }).error).toMatchObject({ code: "invalid_request", param: "speakers" });
    const both = await stack.fetch("/v1/audio/transcriptions/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ audio_url: `${audio.url}/call.wav`, diarize: true, multichannel: true }),
    });
    expect(both.status).toBe(400);
    expect(((await both.json()) as { error: object }).error).toMatchObject({ code: "unsupported_combination", param: "diarize" });
  });
});
