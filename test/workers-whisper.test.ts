import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assemble, createWhisperEngine } from "../services/transcriber/whisper-engine";
import { checkWhisperModelFile } from "../services/transcriber/whisper-model-file";
import { decodeAudio } from "../shared/audio/decode";
import { AppError } from "../shared/errors";
import type { TranscriptionEngine } from "../shared/workers/types";
import { fixturePath } from "./support/fixtures";
import { expectWellFormedTranscript } from "./support/whisper-transcript";
import { writeTinyWhisperModel, type TinyWhisperModel } from "./support/workers-whisper-model";

/**
 * The whisper.cpp engine (its worker process, build/whisper-worker), on models the test writes
 * (test/support/workers-whisper-model.ts: whisper's real vocabulary size and special
 * tokens, one tiny layer each, random weights). The transcripts are nonsense; what is
 * checked is everything around them: the file check, loading, the shape and timings of
 * what comes back, language handling, deadlines. Accuracy needs a trained model:
 * `WHISPER_MODEL_PATH=… ./scripts/bench.sh whisper` (docs/workers.md).
 */
let dir: string;
let en: TinyWhisperModel;
let ml: TinyWhisperModel;
let engine: TranscriptionEngine;
let multilingual: TranscriptionEngine;
const clip = async (name: string) => decodeAudio(await readFile(fixturePath(name)));

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "whisper-test-"));
  en = await writeTinyWhisperModel(join(dir, "tiny.en.bin"));
  ml = await writeTinyWhisperModel(join(dir, "tiny.bin"), { multilingual: true });
  engine = await createWhisperEngine({ modelPath: en.path, threads: 1, parallel: 1 });
  multilingual = await createWhisperEngine({ modelPath: ml.path, threads: 1 });
});
afterAll(async () => {
  await engine?.close();
  await multilingual?.close();
  await rm(dir, { recursive: true, force: true });
});

describe("whisper.cpp engine on a generated model", () => {
  it("the generated file is a complete whisper ggml model of a few MB, and whisper.cpp loads it", async () => {
    expect(en.bytes).toBeLessThan(5_000_000);
    expect(await checkWhisperModelFile(en.path)).toEqual({ nVocab: 51864, nAudioCtx: 1500, multilingual: false, languages: ["en"], tensors: 50 });
    const info = await checkWhisperModelFile(ml.path);
    expect(info).toMatchObject({ nVocab: 51865, multilingual: true, tensors: 50 });
    expect(info.languages).toHaveLength(99);
    expect(engine).toMatchObject({ kind: "whisper-cpp", languages: ["en"], concurrency: 1, formatsText: true });
    expect(multilingual.languages).toEqual(["*"]);
    expect(engine.warm()).toBe(true);
  });

  it("clips come back in the verbose_json shape: words monotonic inside the clip, sentence segments, language, duration", async () => {
    for (const name of ["jfk.wav", "ldc93s1.wav"]) {
      const { pcm, durationSeconds } = await clip(name);
      const r = await engine.transcribe({ pcm, language: "en" });
      console.log(`${name} (${durationSeconds.toFixed(2)} s): ${r.words.length} words in ${r.segments.length} segments: ${r.text}`);
      expectWellFormedTranscript(r, durationSeconds);
      expect(r.language).toBe("en");
      // the random weights still decode text, often whisper's repeated-word loop, within the window's bound
      expect(r.words.length).toBeGreaterThan(0);
    }
    // an English-only model answers in English whatever the hint, and takes a prompt
    const { pcm, durationSeconds } = await clip("ldc93s1.wav");
    const hinted = await engine.transcribe({ pcm, language: "de", prompt: "Dark suit, greasy wash water." });
    expectWellFormedTranscript(hinted, durationSeconds);
    expect(hinted.language).toBe("en");
  });

  it("more than one 30 s window: times stay inside the clip and in order across windows", async () => {
    const { pcm } = await clip("jfk.wav");
    const long = new Int16Array(pcm.length * 4);
    for (let i = 0; i < 4; i++) long.set(pcm, i * pcm.length);
    const r = await engine.transcribe({ pcm: long });
    expectWellFormedTranscript(r, long.length / 16_000);
    console.log(`4 × jfk.wav (${(long.length / 16_000).toFixed(1)} s): ${r.words.length} words, last at ${r.words.at(-1)?.start} s`);
  });

  it("silence and an empty clip are transcribed, not refused", async () => {
    expectWellFormedTranscript(await engine.transcribe({ pcm: new Int16Array(16_000) }), 1);
    expect(await engine.transcribe({ pcm: new Int16Array(0) })).toMatchObject({ text: "", duration: 0, segments: [], words: [] });
  });

  it("a multilingual model detects the language without a hint, takes a regional hint, and refuses a code whisper.cpp does not know", async () => {
    const { pcm, durationSeconds } = await clip("ldc93s1.wav");
    const info = await checkWhisperModelFile(ml.path);
    const detected = await multilingual.transcribe({ pcm });
    expectWellFormedTranscript(detected, durationSeconds);
    expect(info.languages).toContain(detected.language);
    expect((await multilingual.transcribe({ pcm, language: "pt-BR" })).language).toBe("pt");
    // whisper.cpp has no id for an unknown code: the engine refuses it before whisper.cpp sees it
    await expect(multilingual.transcribe({ pcm, language: "xx" })).rejects.toMatchObject({ code: "unsupported_language" });
    expectWellFormedTranscript(await multilingual.transcribe({ pcm, language: "de" }), durationSeconds);
  });

  it("a clip whose deadline passes is answered at once, one queued behind it is dropped, and the engine goes on", { timeout: 60_000 }, async () => {
    const { pcm } = await clip("jfk.wav");
    const running = new AbortController();
    const queued = new AbortController();
    const first = engine.transcribe({ pcm, signal: running.signal });
    const second = engine.transcribe({ pcm, signal: queued.signal });
    // the first clip is on its way to whisper.cpp by now; 11 s of audio (a 30 s window)
    // takes longer than this turn of the event loop
    await new Promise((r) => setImmediate(r));
    const late = new AppError("unavailable", "deadline_passed", "the caller's deadline passed");
    running.abort(late);
    queued.abort(late);
    await expect(first).rejects.toBe(late);
    await expect(second).rejects.toBe(late);
    // The aborted decode is stopped inside whisper.cpp (its abort callback): the next clip is answered.
    const { pcm: short, durationSeconds } = await clip("ldc93s1.wav");
    expectWellFormedTranscript(await engine.transcribe({ pcm: short }), durationSeconds);
    expect(engine.warm()).toBe(true);
  });

  it("refuses a missing, unreadable or non-ggml file, and one cut short anywhere, with a message naming the file", async () => {
    const full = await readFile(en.path);
    const write = async (name: string, bytes: Uint8Array) => {
      const path = join(dir, name);
      await writeFile(path, bytes);
      return path;
    };
    const refused = async (path: string, code: string, why: RegExp) => {
      const err = await createWhisperEngine({ modelPath: path, threads: 1 }).then(
        (e) => (void e.close(), undefined),
        (e: unknown) => e,
      );
      expect(err, path).toBeInstanceOf(AppError);
      expect(err).toMatchObject({ code });
      expect((err as Error).message).toContain(path);
      expect((err as Error).message).toMatch(why);
    };
    await refused(join(dir, "nope.bin"), "whisper_model_missing", /not a readable file/);
    await mkdir(join(dir, "a-directory"));
    await refused(join(dir, "a-directory"), "whisper_model_missing", /not a regular file/);
    await refused(await write("junk.bin", randomBytes(4096)), "whisper_model_invalid", /ggml magic/);
    await refused(await write("model.gguf", Buffer.concat([Buffer.from("GGUF"), full.subarray(4)])), "whisper_model_invalid", /not GGUF/);
    await refused(await write("empty.bin", new Uint8Array(0)), "whisper_model_invalid", /ggml magic/);
    // cut short: in the hyper-parameters, the mel filters, the vocabulary, right after it
    // (whisper.cpp itself would load that as an empty model whose clips never finish),
    // in a tensor's header, in the data of the first and of the last tensor
    const cuts: [number, RegExp][] = [
      [20, /ends at byte 20, inside its hyper-parameters/],
      [1000, /inside its mel filters/],
      [en.tensorsOffset - 10, /inside its vocabulary \(token 50255 of 50256\)/],
      [en.tensorsOffset, /holds no tensors/],
      [en.tensorsOffset + 6, /inside the header of tensor 1 of 50/],
      [en.tensorsOffset + 50_000, /inside tensor 'encoder.positional_embedding' .*truncated/],
      [en.bytes - 1, /inside tensor 'decoder.blocks.0.cross_attn.out.bias' \(50 of 50/],
    ];
    for (const [at, why] of cuts) await refused(await write(`cut-${at}.bin`, full.subarray(0, at)), "whisper_model_invalid", why);
    // an older converter's vocabulary size: the special tokens whisper.cpp derives would not exist
    const small = Buffer.from(full);
    small.writeInt32LE(51000, 4);
    await refused(await write("small-vocab.bin", small), "whisper_model_invalid", /n_vocab is 51000/);
    // no " " token (byte token 220 made "!"): whisper.cpp throws on every clip
    const noSpace = Buffer.from(full);
    const token220 = 48 + 8 + 4 * 80 * 201 + 4 + 5 * 220 + 4;
    expect(noSpace[token220]).toBe(0x20);
    noSpace[token220] = 0x21;
    await refused(await write("no-space.bin", noSpace), "whisper_model_invalid", /no " " token/);
    // the engine still loads the intact file next to them
    await (await createWhisperEngine({ modelPath: en.path, threads: 1 })).close();
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
