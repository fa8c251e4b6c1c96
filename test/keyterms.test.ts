import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { OpenAIRealtimeWS } from "openai/realtime/ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAudio } from "../shared/audio/decode";
import { synthesise } from "./support/espeak";
import { randomHex, serveAudio, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { connectRt, refusal, RELAXED_ADMISSION, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * Keyterms (issue 44) on the real stack with the embedded PocketSphinx engine: the
 * LibriVox clip whose sentence is "and mister john dashwood had then leisure to consider
 * how much there might be prudently in his power to do for them" (Debian's
 * pocketsphinx-testdata) is recognised "john guess would … prickly" without keyterms;
 * with keyterms naming Dashwood and prudently it says both on the segment plane, in a
 * batch job, on the native door and on the OpenAI door (keywords). A made-up word no
 * dictionary holds ("Zorblax"), spoken by espeak-ng, is recognised once it is a keyterm
 * (its pronunciation from letter-to-sound rules), and never without.
 */
const CLIP = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0870.wav";
const TERMS = ["Dashwood", "prudently"];
let stack: Stack;
let key: string;
let clip: Uint8Array;
let dir: string;
let audio: LocalHttp;

beforeAll(async () => {
  clip = new Uint8Array(readFileSync(CLIP));
  dir = mkdtempSync(join(tmpdir(), "keyterms-"));
  stack = await startStack({ RT_STREAM_DECODERS: "2", ...RELAXED_ADMISSION });
  key = (await stack.issueKey("pro", `kt-${randomHex()}`)).key;
  audio = await serveAudio(clip);
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  await audio?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const bearer = () => ({ authorization: `Bearer ${key}` });
const said = (text: string, word: string) => new RegExp(`\\b${word}\\b`, "i").test(text);

async function segment(bytes: Uint8Array, fields: [string, string][] = []) {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(bytes)]), "clip.wav");
  for (const [k, v] of fields) form.append(k, v);
  return stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: bearer() });
}
async function segmentText(bytes: Uint8Array, fields: [string, string][] = []): Promise<string> {
  const res = await segment(bytes, [["response_format", "json"], ...fields]);
  expect(res.status).toBe(200);
  return ((await res.json()) as { text: string }).text;
}

describe("segment plane", () => {
  it("without keyterms 'guess would … prickly'; with them (comma-separated, repeated or a JSON array) Dashwood and prudently", { timeout: 240_000 }, async () => {
    const without = await segmentText(clip);
    console.log(`  without: ${without}`);
    expect(said(without, "dashwood")).toBe(false);
    expect(said(without, "prudently")).toBe(false);
    for (const fields of [[["keyterms", "Dashwood, prudently"]], [["keyterms", "Dashwood"], ["keyterms[]", "prudently"]], [["keyterms", JSON.stringify(TERMS)]]] as [string, string][][]) {
      const text = await segmentText(clip, fields);
      console.log(`  ${JSON.stringify(fields)}: ${text}`);
      expect(text).toContain("Dashwood"); // in the casing given: the keyterm is the caller's vocabulary
      expect(said(text, "prudently")).toBe(true);
    }
    // keyterms and prompt combine
    const both = await segmentText(clip, [["prompt", "Chapter one."], ["keyterms", "Dashwood,prudently"]]);
    expect(said(both, "dashwood") && said(both, "prudently")).toBe(true);
    // a request without keyterms after them is decoded as before (one request's keyterms never reach another's)
    expect(await segmentText(clip)).toBe(without);
  });

  it("a made-up word outside every dictionary, spoken by espeak-ng, is recognised with keyterms and never without", { timeout: 240_000 }, async () => {
    const sentences = ["I bought a new Zorblax today.", "Call the Zorblax team now.", "We shipped the Zorblax update yesterday."];
    let withHits = 0;
    let withoutHits = 0;
    for (const s of sentences) {
      for (const wordsPerMinute of [130, 160]) {
        const wav = await synthesise(s, { voice: "en-us+f2", wordsPerMinute });
        const without = await segmentText(wav);
        const withTerm = await segmentText(wav, [["keyterms", "Zorblax"]]);
        console.log(`  ${s} (${wordsPerMinute} wpm)\n    without: ${without}\n    with:    ${withTerm}`);
        if (said(without, "zorblax")) withoutHits++;
        if (said(withTerm, "zorblax")) withHits++;
      }
    }
    console.log(`Zorblax recognised in ${withHits}/6 clips with keyterms, ${withoutHits}/6 without`);
    expect(withoutHits).toBe(0);
    expect(withHits).toBeGreaterThanOrEqual(1);
  });

  it("400 invalid_request naming keyterms for too many, too long or malformed terms", async () => {
    const cases: [string, string][][] = [
      [["keyterms", Array.from({ length: 101 }, (_, i) => `term${i}`).join(",")]],
      [["keyterms", "x".repeat(51)]],
      [["keyterms", "[\"Dashwood\", 3]"]],
      [["keyterms", "[not json"]],
    ];
    for (const fields of cases) {
      const res = await segment(clip, fields);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ error: { code: "invalid_request", param: "keyterms", type: "invalid_request_error" } });
    }
  });
});

describe("batch plane", () => {
  it("a job with keyterms says Dashwood and prudently; a bad keyterms is 400 with param", { timeout: 240_000 }, async () => {
    const submit = (extra: Record<string, unknown>) =>
      stack.fetch("/v1/audio/transcriptions/jobs", {
        method: "POST",
        headers: { ...bearer(), "content-type": "application/json" },
        body: JSON.stringify({ audio_url: `${audio.url}/clip.wav`, request_id: `kt-${randomHex()}`, ...extra }),
      });
    const res = await submit({ keyterms: TERMS });
    expect(res.status).toBe(202);
    const { workflow_id } = (await res.json()) as { workflow_id: string };
    const view = await waitForJobEnd(stack.fetch, key, workflow_id, { timeoutMs: 120_000 });
    expect(view.status).toBe("complete");
    const text = view.output!.result.text;
    console.log(`  job: ${text}`);
    expect(text).toContain("Dashwood");
    expect(said(text, "prudently")).toBe(true);
    for (const keyterms of [["y".repeat(51)], Array.from({ length: 101 }, (_, i) => `t${i}`), [3]]) {
      const bad = await submit({ keyterms });
      expect(bad.status).toBe(400);
      expect(await bad.json()).toMatchObject({ error: { code: "invalid_request", param: expect.stringMatching(/^keyterms/) } });
    }
  });
});

describe("native realtime door", () => {
  async function transcript(query: string, update?: unknown): Promise<string> {
    const rt = await connectRt(wsUrl(stack.baseUrl, query), bearer());
    await rt.next("session.created");
    if (update) {
      rt.sendJson({ type: "session.update", session: update });
      const updated = await rt.next("session.updated");
      expect(updated.session.input_audio_transcription.keyterms).toEqual(TERMS);
    }
    await streamPcm(rt, (await decodeAudio(clip)).pcm, { speed: 2, chunkBytes: 640 });
    await streamPcm(rt, silence(1.5), { speed: 2, chunkBytes: 640 });
    rt.sendJson({ type: "session.close" });
    await rt.closed;
    return rt.events
      .filter((e) => e.type === "conversation.item.input_audio_transcription.completed")
      .map((e) => e.transcript)
      .join(" ");
  }

  it("keyterms by session.update and by ?keyterms= on the upgrade: Dashwood and prudently", { timeout: 240_000 }, async () => {
    const updated = await transcript("", { input_audio_transcription: { keyterms: TERMS } });
    console.log(`  session.update: ${updated}`);
    expect(said(updated, "dashwood") && said(updated, "prudently")).toBe(true);
    const queried = await transcript(`keyterms=${encodeURIComponent("Dashwood,prudently")}`);
    console.log(`  ?keyterms=: ${queried}`);
    expect(said(queried, "dashwood") && said(queried, "prudently")).toBe(true);
  });

  it("without streaming decoders (items transcribed whole by the engine router): Dashwood and prudently", { timeout: 240_000 }, async () => {
    const plain = await startStack({ RT_STREAM_DECODERS: "0", ...RELAXED_ADMISSION });
    try {
      const plainKey = (await plain.issueKey("pro", `kt-${randomHex()}`)).key;
      const rt = await connectRt(wsUrl(plain.baseUrl, "keyterms=Dashwood&keyterms=prudently"), { authorization: `Bearer ${plainKey}` });
      expect((await rt.next("session.created")).input_audio_transcription.streaming).toBe(false);
      await streamPcm(rt, (await decodeAudio(clip)).pcm, { speed: 2, chunkBytes: 640 });
      await streamPcm(rt, silence(1.5), { speed: 2, chunkBytes: 640 });
      rt.sendJson({ type: "session.close" });
      await rt.closed;
      const text = rt.events
        .filter((e) => e.type === "conversation.item.input_audio_transcription.completed")
        .map((e) => e.transcript)
        .join(" ");
      console.log(`  commit path: ${text}`);
      expect(said(text, "dashwood") && said(text, "prudently")).toBe(true);
    } finally {
      await plain.stop();
    }
  });

  it("a bad keyterms: the upgrade is refused 400 with param, a session.update answered with an error naming the field", { timeout: 60_000 }, async () => {
    const refused = await refusal(wsUrl(stack.baseUrl, `keyterms=${"z".repeat(51)}`), bearer());
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ error: { code: "invalid_request", param: "keyterms" } });
    const rt = await connectRt(wsUrl(stack.baseUrl), bearer());
    await rt.next("session.created");
    rt.sendJson({ type: "session.update", event_id: "kt1", session: { input_audio_transcription: { keyterms: Array.from({ length: 101 }, (_, i) => `t${i}`) } } });
    expect(await rt.next("error")).toMatchObject({ error: { code: "invalid_event", param: "session.input_audio_transcription.keyterms", event_id: "kt1" } });
    rt.ws.close();
    await rt.closed;
  });
});

describe("OpenAI realtime door", () => {
  const plain = { createConnection: ((o: { port: number; host: string }) => net.connect(o.port, o.host)) as never };
  const T = "conversation.item.input_audio_transcription";

  it("keywords in the GA transcription: Dashwood and prudently; languages picks the language; a bad keyword is an error with param", { timeout: 240_000 }, async () => {
    execFileSync("ffmpeg", ["-v", "error", "-i", CLIP, "-ac", "1", "-ar", "24000", "-f", "s16le", join(dir, "clip24.raw")]);
    const pcm24 = readFileSync(join(dir, "clip24.raw"));
    const client = new OpenAI({ apiKey: key, baseURL: `${stack.baseUrl}/v1`, maxRetries: 0 });
    const rt = new OpenAIRealtimeWS({ model: "gpt-4o-transcribe", options: plain }, client);
    const events: any[] = [];
    rt.on("event", (e) => events.push(e));
    rt.on("error", (e) => events.push({ type: "sdk_error", e }));
    await new Promise<void>((resolve, reject) => (rt.socket.once("open", () => resolve()), rt.socket.once("error", reject)));
    const until = async (done: () => boolean) => {
      const deadline = Date.now() + 120_000;
      while (!done()) {
        if (Date.now() > deadline) throw new Error(`timed out; got ${events.map((e) => e.type).join(", ")}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    rt.send({ type: "session.update", event_id: "bad", session: { type: "transcription", audio: { input: { transcription: { keywords: ["q".repeat(51)] } } } } } as never);
    await until(() => events.some((e) => e.type === "error"));
    expect(events.find((e) => e.type === "error")).toMatchObject({ error: { type: "invalid_request_error", param: "session.audio.input.transcription.keywords", event_id: "bad" } });
    rt.send({ type: "session.update", session: { type: "transcription", audio: { input: { format: { type: "audio/pcm", rate: 24000 }, transcription: { model: "gpt-4o-transcribe", keywords: TERMS, languages: ["en"] } } } } } as never);
    await until(() => events.some((e) => e.type === "session.updated"));
    expect(events.find((e) => e.type === "session.updated").session.audio.input.transcription).toMatchObject({ keywords: TERMS, languages: ["en"] });
    for (let at = 0; at < pcm24.length; at += 9600) rt.send({ type: "input_audio_buffer.append", audio: pcm24.subarray(at, at + 9600).toString("base64") });
    for (let i = 0; i < 10; i++) rt.send({ type: "input_audio_buffer.append", audio: Buffer.alloc(9600).toString("base64") });
    const done = () => {
      const items = events.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
      const finished = events.filter((e) => e.type === `${T}.completed` || e.type === `${T}.failed`).map((e) => e.item_id);
      return items.length > 0 && items.every((i: string) => finished.includes(i));
    };
    await until(done);
    rt.close();
    const text = events.filter((e) => e.type === `${T}.completed`).map((e) => e.transcript).join(" ");
    console.log(`  OpenAI door: ${text}`);
    expect(said(text, "dashwood") && said(text, "prudently")).toBe(true);
  });
});
