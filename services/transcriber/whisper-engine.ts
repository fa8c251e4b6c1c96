import { access, open } from "node:fs/promises";
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import type { TranscriptSegment, TranscriptWord, VerboseTranscription } from "../../schemas/transcription";
import { AppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import type { EngineRequest, TranscriptionEngine } from "../../shared/workers/types";
import { segmentFromWords } from "./segments";

/**
 * whisper.cpp through its Node binding (@fugood/node-whisper-*, a prebuilt N-API
 * module; an optional dependency installed where a build exists for the platform).
 * Enabled when the operator sets WHISPER_MODEL_PATH to a ggml model file; the service
 * never downloads weights. The model is loaded once at start and kept; inference runs
 * on libuv's thread pool (the event loop stays free), one clip at a time per context.
 *
 * Word timings: whisper.cpp is asked for one token per segment with token timestamps
 * (`maxLen: 1, tokenTimestamps: true`, the `-ml 1` mode of its CLI); tokens that do
 * not start with a space continue the previous word. Segments are rebuilt from the
 * words, split after sentence punctuation or a pause of a second or more.
 */
export interface WhisperOptions {
  modelPath: string;
  realTimeFactor?: number;
  threads?: number;
  models?: string[];
  logger?: Logger;
}

interface NativeSegment {
  text: string;
  /** ms */
  t0: number;
  t1: number;
}
interface NativeContext {
  transcribeData(pcm: ArrayBuffer, options: Record<string, unknown>): { stop(): Promise<void>; promise: Promise<{ result: string; language?: string; segments: NativeSegment[] }> };
  release(): Promise<void>;
}
interface NativeModule {
  WhisperContext: { new (options: { filePath: string; useGpu?: boolean }): NativeContext | Promise<NativeContext>; toggleNativeLog?(enable: boolean): void };
}

const require = createRequire(import.meta.url);

function loadWhisperBinding(): NativeModule {
  const pkg = `@fugood/node-whisper-${process.platform}-${process.arch}`;
  try {
    return require(`${pkg}/index.node`) as NativeModule;
  } catch (err) {
    throw new AppError("unavailable", "whisper_binding_missing", `the whisper.cpp binding ${pkg} is not installed for this platform`, { cause: err });
  }
}

export async function createWhisperEngine(options: WhisperOptions): Promise<TranscriptionEngine> {
  await access(options.modelPath).catch((err) => {
    throw new AppError("validation", "whisper_model_missing", `WHISPER_MODEL_PATH ${options.modelPath} is not a readable file`, { cause: err });
  });
  const multilingual = await isMultilingual(options.modelPath);
  const binding = loadWhisperBinding();
  binding.WhisperContext.toggleNativeLog?.(false);
  let ctx: NativeContext;
  try {
    ctx = await new binding.WhisperContext({ filePath: options.modelPath, useGpu: false });
  } catch (err) {
    throw new AppError("validation", "whisper_model_invalid", `whisper.cpp could not load ${options.modelPath}: ${(err as Error).message}`, { cause: err });
  }
  options.logger?.info("whisper.cpp model loaded", { modelPath: options.modelPath });
  const threads = options.threads ?? Math.max(1, availableParallelism());
  let closed = false;
  let chain: Promise<unknown> = Promise.resolve();

  const run = async (request: EngineRequest): Promise<VerboseTranscription> => {
    const duration = request.pcm.length / 16_000;
    if (request.pcm.length === 0) return assemble([], duration, request.language ?? "en");
    const pcm = request.pcm.slice().buffer;
    const job = ctx.transcribeData(pcm, {
      // No hint: a multilingual model detects the language; an English-only one is en.
      language: request.language ?? (multilingual ? "auto" : "en"),
      ...(request.prompt ? { prompt: request.prompt } : {}),
      maxLen: 1,
      tokenTimestamps: true,
      maxThreads: threads,
      temperature: 0,
    });
    const onAbort = () => void job.stop();
    request.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const out = await job.promise;
      const language = out.language && out.language !== "auto" ? out.language : request.language ?? "en";
      return assemble(out.segments, duration, language);
    } catch (err) {
      throw new AppError("upstream", "whisper_failed", `whisper.cpp: ${(err as Error).message}`, { cause: err });
    } finally {
      request.signal?.removeEventListener("abort", onAbort);
    }
  };

  return {
    kind: "whisper-cpp",
    formatsText: true,
    models: options.models ?? ["stt-1", "whisper-1", "stt-large-v3-turbo"],
    languages: multilingual ? ["*"] : ["en"],
    realTimeFactor: options.realTimeFactor ?? 1,
    concurrency: 1,
    warm: () => !closed,
    transcribe(request) {
      if (closed) return Promise.reject(new AppError("unavailable", "engine_closed", "the engine is shutting down"));
      // One context decodes one clip at a time: queue behind the previous one.
      const next = chain.then(() => run(request));
      chain = next.catch(() => undefined);
      return next;
    },
    async close() {
      closed = true;
      await chain;
      await ctx.release();
    },
  };
}

/** ggml whisper header: magic, then n_vocab; multilingual models have ≥ 51865 tokens. */
async function isMultilingual(path: string): Promise<boolean> {
  const file = await open(path, "r");
  try {
    const head = Buffer.alloc(8);
    await file.read(head, 0, 8, 0);
    return head.readUInt32LE(0) === 0x67676d6c && head.readInt32LE(4) >= 51865;
  } finally {
    await file.close();
  }
}

/** Token segments (ms) → words → sentence segments (seconds, clamped to the clip). */
export function assemble(tokens: NativeSegment[], duration: number, language: string): VerboseTranscription {
  const clamp = (ms: number) => Math.round(Math.min(Math.max(0, ms / 1000), duration) * 100) / 100;
  const words: TranscriptWord[] = [];
  for (const t of tokens) {
    if (!t.text || !t.text.trim()) continue;
    const start = clamp(t.t0);
    const end = Math.max(start, clamp(t.t1));
    const last = words.at(-1);
    if (last && !/^\s/.test(t.text)) {
      last.word += t.text;
      last.end = Math.max(last.end, end);
    } else {
      words.push({ word: t.text.trim(), start: Math.max(start, last?.start ?? 0), end });
    }
  }
  const segments: TranscriptSegment[] = [];
  let current: TranscriptWord[] = [];
  const flush = () => {
    if (current.length === 0) return;
    segments.push(segmentFromWords(segments.length, current));
    current = [];
  };
  for (const w of words) {
    const prev = current.at(-1);
    if (prev && w.start - prev.end >= 1) flush();
    current.push(w);
    if (/[.?!]$/.test(w.word)) flush();
  }
  flush();
  return { task: "transcribe", language, duration: Math.round(duration * 1000) / 1000, text: segments.map((s) => s.text.trim()).join(" "), segments, words };
}
