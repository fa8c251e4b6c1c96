import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { verboseTranscription } from "../schemas/transcription";
import { assemble, createWhisperEngine } from "../services/transcriber/whisper-engine";
import { startWorkerService } from "../services/transcriber/worker-service";
import { decodeAudio } from "../shared/audio/decode";
import { createLogger } from "../shared/logger";
import { connectNats, destroyTopology, type Nats } from "../shared/nats";
import { createWorkerRouter } from "../shared/workers/router";
import type { TranscriptionEngine } from "../shared/workers/types";
import { wordErrorRate } from "../shared/workers/wer";
import { writeTinyWhisperModel } from "./support/workers-whisper-model";
import { fixturePath } from "./support/fixtures";

const LDC = fixturePath("ldc93s1.wav");

describe("whisper.cpp worker (Node binding) with a generated tiny ggml model", () => {
  let dir: string;
  let engine: TranscriptionEngine;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "whisper-test-"));
    const model = await writeTinyWhisperModel(join(dir, "tiny.bin"));
    expect(model.bytes).toBeGreaterThan(10_000_000);
    engine = await createWhisperEngine({ modelPath: model.path, threads: 1 });
  });
  afterAll(async () => {
    await engine?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("loads once and stays warm; a clip comes back in the verbose_json shape with in-clip timings", async () => {
    expect(engine.warm()).toBe(true);
    expect(engine.kind).toBe("whisper-cpp");
    const { pcm, durationSeconds } = await decodeAudio(await readFile(LDC));
    const r = verboseTranscription.parse(await engine.transcribe({ pcm, language: "en" }));
    expect(r.duration).toBeCloseTo(durationSeconds, 2);
    expect(r.language).toBe("en");
    let last = 0;
    for (const w of r.words) {
      expect(w.start).toBeGreaterThanOrEqual(last);
      expect(w.end).toBeLessThanOrEqual(durationSeconds);
      last = w.start;
    }
    for (const s of r.segments) expect(s.end).toBeLessThanOrEqual(durationSeconds);
    // no hint: an English-only model answers in English
    expect((await engine.transcribe({ pcm })).language).toBe("en");
    const empty = await engine.transcribe({ pcm: new Int16Array(0) });
    expect(empty).toMatchObject({ text: "", segments: [], words: [] });
  });

  it("runs as a NATS worker the router reaches (worker_id pinning, no fallback)", async () => {
    const nats: Nats = await connectNats({ url: process.env.NATS_URL ?? "nats://127.0.0.1:4222", prefix: `t${randomBytes(4).toString("hex")}` });
    const logger = createLogger("error");
    const other = await createWhisperEngine({ modelPath: join(dir, "tiny.bin"), threads: 1 });
    const worker = await startWorkerService({ nats, engine: other, id: "whisper-test", heartbeatMs: 200, logger });
    const router = await createWorkerRouter({ nats, budgetMs: 800, staleMs: 5000, logger });
    try {
      const until = Date.now() + 3000;
      while (!router.workers().some((w) => w.id === "whisper-test" && w.warm) && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
      expect(router.workers().find((w) => w.id === "whisper-test")).toMatchObject({ kind: "whisper-cpp", warm: true });
      const { pcm } = await decodeAudio(await readFile(LDC));
      const r = await router.transcribe({ pcm, workerId: "whisper-test" });
      expect(r).toMatchObject({ workerId: "whisper-test", fallbackUsed: false });
      expect(r.result.duration).toBeCloseTo(2.925, 2);
    } finally {
      await router.stop();
      await worker.stop();
      await destroyTopology(nats);
      await nats.close();
    }
  });

  it("refuses a missing or corrupt model file with a clear error", async () => {
    await expect(createWhisperEngine({ modelPath: join(dir, "nope.bin") })).rejects.toMatchObject({ code: "whisper_model_missing" });
    await writeFile(join(dir, "junk.bin"), randomBytes(4096));
    await expect(createWhisperEngine({ modelPath: join(dir, "junk.bin") })).rejects.toMatchObject({ code: "whisper_model_invalid" });
  });

  it("assembles whisper.cpp tokens into words and sentence segments", () => {
    const r = assemble(
      [
        { text: " And", t0: 0, t1: 300 },
        { text: " so", t0: 300, t1: 500 },
        { text: " Amer", t0: 500, t1: 800 },
        { text: "icans.", t0: 800, t1: 1200 },
        { text: " Ask", t0: 2600, t1: 2900 },
        { text: " not", t0: 2900, t1: 99_000 },
      ],
      4,
      "en",
    );
    expect(r.words.map((w) => w.word)).toEqual(["And", "so", "Americans.", "Ask", "not"]);
    expect(r.words[2]).toMatchObject({ start: 0.5, end: 1.2 });
    expect(r.words[4]!.end).toBe(4);
    expect(r.segments.map((s) => s.text)).toEqual([" And so Americans.", " Ask not"]);
    expect(r.text).toBe("And so Americans. Ask not");
  });
});

// Accuracy needs real weights: set WHISPER_MODEL_PATH to a ggml model (e.g. ggml-base.en.bin).
describe.skipIf(!process.env.WHISPER_MODEL_PATH)("whisper.cpp accuracy with the operator's model", () => {
  it("transcribes the LibriVox clips with WER below 20%", async () => {
    const engine = await createWhisperEngine({ modelPath: process.env.WHISPER_MODEL_PATH! });
    try {
      const dirPath = "/usr/share/pocketsphinx/test/data/librivox";
      const lines = (await readFile(`${dirPath}/transcription`, "utf8")).split("\n").filter(Boolean);
      let errors = 0;
      let words = 0;
      for (const l of lines) {
        const m = /^(.*)\(([^)]+)\)\s*$/.exec(l)!;
        const { pcm } = await decodeAudio(await readFile(`${dirPath}/${m[2]}.wav`));
        const r = await engine.transcribe({ pcm, language: "en" });
        const w = wordErrorRate(m[1]!.replace(/<\/?s>/g, ""), r.text);
        errors += w.errors;
        words += w.referenceWords;
      }
      console.log(`whisper.cpp LibriVox WER ${((errors / words) * 100).toFixed(1)}%`);
      expect(errors / words).toBeLessThan(0.2);
    } finally {
      await engine.close();
    }
  });
});
