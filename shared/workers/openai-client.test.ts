import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { encodeWav } from "../audio/wav";
import { modelsUrl, multipartBody, normaliseVerbose, transcribeWithOpenAI, transcriptionsUrl } from "./openai-client";
import { attemptTimeoutMs } from "./router";

describe("OpenAI-compatible client helpers", () => {
  it("accepts base URLs with or without /v1 and full endpoint URLs", () => {
    expect(transcriptionsUrl("http://h:8000")).toBe("http://h:8000/v1/audio/transcriptions");
    expect(transcriptionsUrl("http://h:8000/v1/")).toBe("http://h:8000/v1/audio/transcriptions");
    expect(transcriptionsUrl("https://x/openai/v1/audio/transcriptions")).toBe("https://x/openai/v1/audio/transcriptions");
    expect(modelsUrl("http://h:8000")).toBe("http://h:8000/v1/models");
  });
  it("normalises a plain json answer to one segment covering the clip", () => {
    const r = normaliseVerbose({ text: " hi there " }, 2.5);
    expect(r).toMatchObject({ text: "hi there", duration: 2.5, language: "en", words: [] });
    expect(r.segments).toEqual([expect.objectContaining({ id: 0, start: 0, end: 2.5, text: " hi there " })]);
  });
  it("keeps upstream segments and words, dropping unknown fields", () => {
    const r = normaliseVerbose(
      { text: "a b", language: "english", duration: 1, segments: [{ id: 7, start: 0, end: 1, text: " a b", extra: true }], words: [{ word: "a", start: 0, end: 0.4, x: 1 }] },
      1,
    );
    expect(r.segments[0]).toMatchObject({ id: 0, start: 0, end: 1, text: " a b" });
    expect(r.words).toEqual([{ word: "a", start: 0, end: 0.4 }]);
  });
});

describe("the upstream multipart body", () => {
  it("parses back (as a server would) to the same fields and file bytes", async () => {
    const wav = encodeWav(new Int16Array(1600).map((_, i) => (i * 37) % 30000));
    const prompt = 'Names: "Zoë", O\'Brien\r\n--not a boundary\n€';
    const { parts, contentType } = multipartBody([["model", "whisper-1"], ["timestamp_granularities[]", "word"], ["timestamp_granularities[]", "segment"], ["prompt", prompt]], [wav.subarray(0, 44), wav.subarray(44)]);
    const form = await new Response(Buffer.concat(parts), { headers: { "content-type": contentType } }).formData();
    expect(form.get("model")).toBe("whisper-1");
    expect(form.getAll("timestamp_granularities[]")).toEqual(["word", "segment"]);
    expect(form.get("prompt")).toBe(prompt);
    const file = form.get("file") as File;
    expect(file.name).toBe("audio.wav");
    expect(file.type).toBe("audio/wav");
    expect(Buffer.from(await file.arrayBuffer()).equals(wav)).toBe(true);
  });
});

describe("the upstream request and its signal", () => {
  it("an abort while the server holds the request rejects with the signal's reason and closes the connection; an aborted signal posts nothing", async () => {
    let requests = 0;
    let closed!: () => void;
    const connectionClosed = new Promise<void>((r) => (closed = r));
    // a server that reads the clip and never answers
    const server = createServer((req) => {
      requests++;
      req.resume();
      req.socket.once("close", () => closed());
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const controller = new AbortController();
      const reason = new Error("the caller stopped waiting");
      const pending = transcribeWithOpenAI({ url }, { pcm: new Int16Array(16_000), signal: controller.signal });
      while (requests === 0) await new Promise((r) => setTimeout(r, 5));
      controller.abort(reason);
      await expect(pending).rejects.toBe(reason);
      await connectionClosed;
      await expect(transcribeWithOpenAI({ url }, { pcm: new Int16Array(160), signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
      expect(requests).toBe(1);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

describe("per-attempt timeout rule", () => {
  it("is the budget for short clips on fast workers and grows for slow engines", () => {
    expect(attemptTimeoutMs(800, 3, 0.1)).toBe(800);
    expect(attemptTimeoutMs(800, 60, 1)).toBe(90_250);
  });
});
