import { createReadStream, readFileSync } from "node:fs";
import OpenAI, { toFile } from "openai";
import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wordErrorRate } from "../shared/workers/wer";
import { startStack, type Stack } from "./support/stack";
import { FIXTURES_DIR } from "./support/fixtures";

const FIX = FIXTURES_DIR;
const LIBRI = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0920.wav";
const REF = "had he married a more amiable woman he might have been made still more respectable than he was";

describe("the openai npm SDK against our base URL", () => {
  let stack: Stack;
  let client: OpenAI;
  let key: string;

  beforeAll(async () => {
    stack = await startStack({ POCKETSPHINX_PROCESSES: "2" });
    ({ key } = await stack.issueKey("pro", "tenant-sdk"));
    client = new OpenAI({ apiKey: key, baseURL: `${stack.baseUrl}/v1`, maxRetries: 0, timeout: 60_000 });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("verbose_json with segments and words (file stream upload)", async () => {
    const r = await client.audio.transcriptions.create({
      file: createReadStream(LIBRI),
      model: "stt-1",
      response_format: "verbose_json",
      timestamp_granularities: ["word", "segment"],
    });
    console.log(`SDK verbose_json: ${r.text}`);
    expect(wordErrorRate(REF, r.text).wer).toBeLessThan(0.5);
    expect(r.duration).toBeGreaterThan(5);
    expect(r.segments!.length).toBeGreaterThan(0);
    expect(r.words!.length).toBeGreaterThan(5);
    expect(r.words![0]).toMatchObject({ word: expect.any(String), start: expect.any(Number), end: expect.any(Number) });
  });

  it("stream: true gives OpenAI's transcript.text.delta events and the done event", async () => {
    const file = await toFile(await readFile(LIBRI), "clip.wav");
    const stream = await client.audio.transcriptions.create({ file, model: "stt-1", response_format: "json", stream: true });
    const deltas: string[] = [];
    let done: { text: string; usage?: { type: string; seconds?: number } } | undefined;
    for await (const event of stream) {
      if (event.type === "transcript.text.delta") deltas.push(event.delta);
      else if (event.type === "transcript.text.done") done = event as never;
    }
    expect(deltas.length).toBeGreaterThan(0);
    expect(done).toBeDefined();
    expect(deltas.join("")).toBe(done!.text);
    expect(wordErrorRate(REF, done!.text).wer).toBeLessThan(0.5);
    expect(done!.usage).toMatchObject({ type: "duration", seconds: expect.any(Number) });
  });

  it("timestamp_granularities[] shapes verbose_json; include[] values are refused by name", async () => {
    const form = (extra: [string, string][]) => {
      const f = new FormData();
      f.set("file", new Blob([readFileSync(`${FIX}/ldc93s1.wav`)], { type: "audio/wav" }), "a.wav");
      f.set("response_format", "verbose_json");
      for (const [k, v] of extra) f.append(k, v);
      return f;
    };
    const post = (f: FormData) => stack.fetch("/v1/audio/transcriptions", { method: "POST", headers: { authorization: `Bearer ${key}` }, body: f });
    const segmentsOnly = (await (await post(form([["timestamp_granularities[]", "segment"]]))).json()) as any;
    expect(segmentsOnly.segments.length).toBeGreaterThan(0);
    expect(segmentsOnly.words).toBeUndefined();
    const both = (await (await post(form([["timestamp_granularities[]", "segment"], ["timestamp_granularities[]", "word"]]))).json()) as any;
    expect(both.words.length).toBeGreaterThan(0);
    const bad = await post(form([["timestamp_granularities[]", "character"]]));
    expect(bad.status).toBe(400);
    const include = await post(form([["include[]", "logprobs"]]));
    expect(include.status).toBe(400);
    expect(((await include.json()) as any).error).toMatchObject({ code: "unsupported_include", param: "include" });
  });

  it("json, text, srt and vtt", async () => {
    const file = await toFile(await readFile(`${FIX}/ldc93s1.wav`), "ldc93s1.wav");
    const json = await client.audio.transcriptions.create({ file, model: "stt-1", response_format: "json" });
    expect(json.text.length).toBeGreaterThan(5);
    const again = await toFile(await readFile(`${FIX}/ldc93s1.wav`), "ldc93s1.wav");
    const text = await client.audio.transcriptions.create({ file: again, model: "stt-1", response_format: "text" });
    expect(typeof text).toBe("string");
    expect((text as unknown as string).trim()).toBe(json.text);
    const srt = await client.audio.transcriptions.create({ file: await toFile(await readFile(`${FIX}/ldc93s1.wav`), "a.wav"), model: "stt-1", response_format: "srt" });
    expect(srt as unknown as string).toMatch(/^1\n00:00:00,\d{3} --> /);
    const vtt = await client.audio.transcriptions.create({ file: await toFile(await readFile(`${FIX}/ldc93s1.wav`), "a.wav"), model: "stt-1", response_format: "vtt" });
    expect(vtt as unknown as string).toMatch(/^WEBVTT\n\n00:00:00\.\d{3} --> /);
  });

  it("an MP3 through the SDK, and the SDK's error type for a bad key", async () => {
    const r = await client.audio.transcriptions.create({ file: createReadStream(`${FIX}/jfk.mp3`), model: "whisper-1" });
    expect(r.text.length).toBeGreaterThan(10);
    const bad = new OpenAI({ apiKey: "sk-not-a-real-key-0000000000", baseURL: `${stack.baseUrl}/v1`, maxRetries: 0 });
    const err = await bad.audio.transcriptions.create({ file: await toFile(new Uint8Array(10), "a.wav"), model: "stt-1" }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(err.status).toBe(401);
  });
});
