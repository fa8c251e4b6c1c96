import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAudio } from "../shared/audio/decode";
import { formattedErrorRate, wordErrorRate } from "../shared/workers/wer";
import { FORMAT_FIXTURES, FORMAT_SENTENCES, synthesise } from "./support/espeak";
import { fixturePath } from "./support/fixtures";
import { randomHex, startHttp, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { connectRt, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * Smart format (issue 16) on every plane, on real PocketSphinx output of real and
 * synthesised speech: sentences spoken with Debian's espeak-ng carry numbers, currency,
 * percentages, times, dates and questions, with the formatted text written beside each.
 * Formatting improves the formatted score, never changes the recognised words, and is
 * off when asked.
 */
let stack: Stack;
let key: string;
let audio: LocalHttp;
const JFK = readFileSync(fixturePath("jfk.wav"));

beforeAll(async () => {
  stack = await startStack({ RT_STREAM_DECODERS: "2" });
  key = (await stack.issueKey("pro", `fmt-${randomHex()}`)).key;
  audio = await startHttp((_req, res) => {
    res.writeHead(200, { "content-type": "audio/wav" });
    res.end(JFK);
  });
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  await audio?.stop();
});

const bearer = () => ({ authorization: `Bearer ${key}` });
/** Anything smart format adds: capitals, digits, sentence and numeral punctuation. */
const FORMATTED = /[A-Z0-9.?!%$:]/;

async function transcribe(bytes: Uint8Array, fields: Record<string, string> = {}) {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(bytes)]), "clip.wav");
  for (const [k, v] of Object.entries(fields)) form.set(k, v);
  const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: bearer() });
  expect(res.status).toBe(200);
  return res;
}

describe("segment plane", () => {
  it("formats espeak-ng sentences and the fixtures: the formatted score improves, the recognised words do not change, off formats nothing", { timeout: 300_000 }, async () => {
    let onErrors = 0;
    let offErrors = 0;
    let exact = 0;
    const clips = [
      ...FORMAT_SENTENCES.map((s) => ({ ...s, wav: () => synthesise(s.spoken) })),
      ...FORMAT_FIXTURES.map((f) => ({ ...f, prompt: undefined, wav: async () => new Uint8Array(readFileSync(fixturePath(f.file))) })),
    ];
    for (const s of clips) {
      const wav = await s.wav();
      const extra: Record<string, string> = s.prompt ? { prompt: s.prompt } : {};
      const on = (await (await transcribe(wav, { ...extra, response_format: "verbose_json" })).json()) as any;
      const off = (await (await transcribe(wav, { ...extra, response_format: "verbose_json", smart_format: "false" })).json()) as any;
      // the same recognised tokens, so the normalised word error rate is the same
      expect(on.words.map((w: any) => w.word)).toEqual(off.words.map((w: any) => w.word));
      expect(wordErrorRate(s.spoken, on.words.map((w: any) => w.word).join(" ")).errors).toBe(wordErrorRate(s.spoken, off.text).errors);
      // off: the engine's words as recognised, nothing added
      expect(off.text).not.toMatch(FORMATTED);
      expect(off.words.every((w: any) => w.punctuated_word === undefined)).toBe(true);
      // on: every word has its form, and the non-empty forms are the text
      expect(on.words.every((w: any) => typeof w.punctuated_word === "string")).toBe(true);
      expect(on.words.map((w: any) => w.punctuated_word).filter(Boolean).join(" ")).toBe(on.text);
      expect(on.text).toMatch(/^[A-Z0-9$]/);
      expect(on.text).toMatch(/[.?!]$/);
      onErrors += formattedErrorRate(s.formatted, on.text).errors;
      offErrors += formattedErrorRate(s.formatted, off.text).errors;
      if (on.text === s.formatted) exact++;
      console.log(`  ${s.formatted}\n    on:  ${on.text}\n    off: ${off.text}`);
    }
    console.log(`formatted errors: ${onErrors} with smart format, ${offErrors} without; ${exact}/${clips.length} exactly as written`);
    expect(onErrors).toBeLessThan(offErrors / 2);
    expect(exact).toBeGreaterThanOrEqual(3);
  });

  it("SRT and VTT cues start with a capital and end their sentences with punctuation; text and json formatted; off leaves them", { timeout: 240_000 }, async () => {
    for (const format of ["srt", "vtt"]) {
      const body = await (await transcribe(JFK, { response_format: format })).text();
      const cues = body.split(/\r?\n/).filter((l) => l && !/-->/.test(l) && !/^\d+$/.test(l) && l !== "WEBVTT");
      expect(cues.length).toBeGreaterThan(0);
      for (const cue of cues) {
        expect(cue).toMatch(/^[A-Z0-9$]/);
        expect(cue).toMatch(/[.?!]$/);
      }
      const plain = await (await transcribe(JFK, { response_format: format, smart_format: "false" })).text();
      const plainCues = plain.split(/\r?\n/).filter((l) => l && !/-->/.test(l) && !/^\d+$/.test(l) && l !== "WEBVTT");
      for (const cue of plainCues) expect(cue).not.toMatch(FORMATTED);
    }
    const text = await (await transcribe(JFK, { response_format: "text" })).text();
    expect(text.trim()).toMatch(/^And .*[.?!]$/);
    const json = (await (await transcribe(JFK, { response_format: "json" })).json()) as { text: string };
    expect(json.text).toBe(text.trim());
  });

  it("400 for a smart_format that is not true or false", async () => {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(JFK)]), "clip.wav");
    form.set("smart_format", "yes");
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: bearer() });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: "invalid_request", param: "smart_format" } });
  });
});

describe("realtime plane", () => {
  async function session(smartFormat: boolean) {
    const rt = await connectRt(wsUrl(stack.baseUrl), bearer());
    const created = await rt.next("session.created");
    expect(created.input_audio_transcription.smart_format).toBe(true);
    if (!smartFormat) {
      rt.sendJson({ type: "session.update", session: { input_audio_transcription: { smart_format: false } } });
      expect((await rt.next("session.updated")).session.input_audio_transcription.smart_format).toBe(false);
    }
    const pcm = (await decodeAudio(JFK)).pcm;
    await streamPcm(rt, pcm, { speed: 2, chunkBytes: 640 });
    await streamPcm(rt, silence(1.5), { speed: 2, chunkBytes: 640 });
    rt.sendJson({ type: "session.close" });
    await rt.closed;
    const completed = rt.events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed");
    const deltas = (item: string) =>
      rt.events
        .filter((e) => e.type === "conversation.item.input_audio_transcription.delta" && e.item_id === item)
        .map((e) => e.delta)
        .join("");
    return { completed, deltas };
  }

  it("completed transcripts are sentences, the deltas still concatenate to them; smart_format false leaves them as recognised", { timeout: 240_000 }, async () => {
    const on = await session(true);
    expect(on.completed.length).toBeGreaterThan(0);
    for (const c of on.completed.filter((c: any) => c.transcript)) {
      expect(c.transcript).toMatch(/^[A-Z0-9$]/);
      expect(c.transcript).toMatch(/[.?!]$/);
      expect(on.deltas(c.item_id)).toBe(c.transcript);
      expect(c.words.every((w: any) => typeof w.punctuated_word === "string")).toBe(true);
    }
    const off = await session(false);
    for (const c of off.completed) {
      expect(c.transcript).not.toMatch(FORMATTED);
      expect(off.deltas(c.item_id)).toBe(c.transcript);
    }
  });
});

describe("batch plane", () => {
  async function job(extra: Record<string, unknown>) {
    const res = await stack.fetch("/v1/audio/transcriptions/jobs", {
      method: "POST",
      headers: { ...bearer(), "content-type": "application/json" },
      body: JSON.stringify({ audio_url: `${audio.url}/jfk.wav`, request_id: `fmt-${randomHex()}`, ...extra }),
    });
    expect(res.status).toBe(202);
    const { workflow_id } = (await res.json()) as { workflow_id: string };
    const view = await waitForJobEnd(stack.fetch, key, workflow_id, { timeoutMs: 90_000 });
    expect(view.status).toBe("complete");
    return view.output!.result;
  }

  it("results are formatted by default with the job's metadata terms, and not with smart_format false", { timeout: 240_000 }, async () => {
    const on = await job({ metadata: { speaker: "John F. Kennedy", audience: "Americans" } });
    expect(on.text).toMatch(/^And /);
    expect(on.text).toMatch(/[.?!]$/);
    expect(on.text).toContain("Americans");
    for (const s of on.segments) expect(s.text).toMatch(/^[A-Z0-9$].*[.?!]$/);
    const off = await job({ smart_format: false, metadata: { audience: "Americans" } });
    expect(off.text).not.toMatch(FORMATTED);
    const body = await stack.fetch("/v1/audio/transcriptions/jobs", {
      method: "POST",
      headers: { ...bearer(), "content-type": "application/json" },
      body: JSON.stringify({ audio_url: `${audio.url}/jfk.wav`, smart_format: "no" }),
    });
    expect(body.status).toBe(400);
  });
});
