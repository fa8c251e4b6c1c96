import { constants } from "node:fs";
import { access, stat } from "node:fs/promises";
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import type { TranscriptSegment, TranscriptWord, VerboseTranscription } from "../../schemas/transcription";
import { AppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import type { EngineRequest, TranscriptionEngine } from "../../shared/workers/types";
import { segmentFromWords } from "./segments";
import { checkWhisperModelFile, type WhisperModelInfo } from "./whisper-model-file";
import { promptWithKeyterms } from "../../shared/workers/keyterms";

/**
 * whisper.cpp through its Node binding (@fugood/node-whisper-*, a prebuilt N-API
 * module; an optional dependency installed where a build exists for the platform).
 * Enabled when the operator sets WHISPER_MODEL_PATH to a ggml model file; the service
 * never downloads weights. The file is checked (whisper-model-file.ts), then loaded
 * once at start and kept; inference runs on libuv's thread pool (the event loop stays
 * free), one clip at a time per context.
 *
 * Word timings: whisper.cpp is asked for one token per segment with token timestamps
 * (`maxLen: 1, tokenTimestamps: true`, the `-ml 1` mode of its CLI); tokens that do
 * not start with a space continue the previous word. Segments are rebuilt from the
 * words, split after sentence punctuation or a pause of a second or more.
 *
 * Output is bounded by whisper.cpp itself: it decodes 30 s windows, each at most
 * n_text_ctx / 2 − 4 tokens (220 for the released models), and re-decodes a window at
 * higher temperatures when the text repeats or is improbable (its defaults), so a
 * looping or nonsensical decode costs at most six passes per window and never grows
 * without end. A clip with no speech may come back with no words at all.
 *
 * The binding (checked on 1.1.3) never settles a transcription it was asked to stop,
 * and it does not interrupt the decode either: the context finishes that clip and
 * only then takes the next. So a clip whose caller's deadline passes is answered at
 * once with the deadline error here, not by waiting on the binding; a clip still
 * queued behind it is dropped before it starts.
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
  const unreadable = await access(options.modelPath, constants.R_OK).then(
    () => stat(options.modelPath).then((s) => (s.isFile() ? undefined : new Error("not a regular file"))),
    (err: Error) => err,
  );
  if (unreadable) throw new AppError("validation", "whisper_model_missing", `WHISPER_MODEL_PATH ${options.modelPath} is not a readable file (${unreadable.message})`, { cause: unreadable });
  const model = await checkWhisperModelFile(options.modelPath);
  const binding = loadWhisperBinding();
  binding.WhisperContext.toggleNativeLog?.(false);
  let ctx: NativeContext;
  try {
    ctx = await new binding.WhisperContext({ filePath: options.modelPath, useGpu: false });
  } catch (err) {
    throw new AppError("validation", "whisper_model_invalid", `whisper.cpp could not load WHISPER_MODEL_PATH ${options.modelPath}: ${(err as Error).message}`, { cause: err });
  }
  options.logger?.info("whisper.cpp model loaded", { modelPath: options.modelPath, nVocab: model.nVocab, multilingual: model.multilingual });
  const threads = options.threads ?? Math.max(1, availableParallelism());
  let closed = false;
  let chain: Promise<unknown> = Promise.resolve();

  const run = async (request: EngineRequest): Promise<VerboseTranscription> => {
    // dropped while it waited for the clip before it: nobody is waiting for it
    if (request.signal?.aborted) throw request.signal.reason;
    const duration = request.pcm.length / 16_000;
    const language = whisperLanguage(request.language, model);
    if (request.pcm.length === 0) return assemble([], duration, language === "auto" ? "en" : language);
    const prompt = promptWithKeyterms(request.prompt, request.keyterms);
    const job = ctx.transcribeData(request.pcm.slice().buffer, {
      language,
      ...(prompt ? { prompt } : {}),
      maxLen: 1,
      tokenTimestamps: true,
      maxThreads: threads,
      temperature: 0,
      ...(request.partial ? { audioCtx: partialAudioCtx(request.pcm.length, model.nAudioCtx) } : {}),
    });
    let out: Awaited<typeof job.promise>;
    try {
      // stop() is a courtesy: the binding neither interrupts the decode nor settles the promise
      out = await untilAborted(job.promise, request.signal, () => void Promise.resolve().then(() => job.stop()).catch(() => undefined));
    } catch (err) {
      if (request.signal?.aborted) throw err;
      throw new AppError("upstream", "whisper_failed", `whisper.cpp: ${(err as Error).message}`, { cause: err });
    }
    const detected = out.language && out.language !== "auto" ? out.language : language === "auto" ? "en" : language;
    return assemble(out.segments, duration, detected);
  };

  return {
    kind: "whisper-cpp",
    formatsText: true,
    models: options.models ?? ["stt-1", "whisper-1", "stt-large-v3-turbo"],
    languages: model.multilingual ? ["*"] : ["en"],
    realTimeFactor: options.realTimeFactor ?? 1,
    concurrency: 1,
    warm: () => !closed,
    transcribe(request) {
      if (closed) return Promise.reject(new AppError("unavailable", "engine_closed", "the engine is shutting down"));
      // One context decodes one clip at a time: queue behind the previous one.
      const next = chain.then(() => run(request));
      chain = next.catch(() => undefined);
      // a clip whose deadline passes while it waits is answered now, and skipped when its turn comes
      return untilAborted(next, request.signal);
    },
    async close() {
      closed = true;
      await chain;
      await ctx.release();
    },
  };
}

/**
 * The language whisper.cpp is given: the hint's base code ("pt-BR" → "pt") when the
 * model knows it, "auto" (detect) without a hint, "en" for an English-only model
 * (whisper.cpp ignores any other there). A multilingual model given a code it does not
 * know would take the process down (the binding throws from a native callback), so
 * such a hint is refused here.
 */
function whisperLanguage(hint: string | undefined, model: WhisperModelInfo): string {
  if (!model.multilingual) return "en";
  if (!hint) return "auto";
  const code = hint.toLowerCase().split(/[-_]/)[0]!;
  if (model.languages.includes(code)) return code;
  throw new AppError("validation", "unsupported_language", `whisper.cpp does not know the language "${hint}"; this model knows ${model.languages.join(", ")}`);
}

/**
 * The encoder window for a partial re-decode (whisper.cpp's `audio_ctx`, the binding's
 * `audioCtx`): the clip's own length (one encoder position per 20 ms) and a second
 * more, so a 2 s buffer does not pay for the model's 30 s window. Only partials: a
 * shortened window costs some accuracy on trained models, and the final decodes the
 * whole item in the full window.
 */
function partialAudioCtx(samples: number, modelCtx: number): number {
  return Math.min(modelCtx, Math.ceil(samples / 320) + 50);
}

/** `p`, or the signal's reason as soon as it aborts (then `onAbort`), whichever comes first. */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined, onAbort?: () => void): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const abort = () => {
      reject(signal.reason);
      onAbort?.();
    };
    if (signal.aborted) return abort();
    signal.addEventListener("abort", abort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort));
  });
}

/** Token segments (ms) → words → sentence segments (seconds, clamped to the clip). */
export function assemble(tokens: NativeSegment[], duration: number, language: string): VerboseTranscription {
  const clamp = (ms: number) => Math.round(Math.min(Math.max(0, ms / 1000), duration) * 100) / 100;
  const words: TranscriptWord[] = [];
  for (const t of tokens) {
    if (!t.text || !t.text.trim()) continue;
    const last = words.at(-1);
    // in order: a word starts no earlier than the one before it, and ends no earlier than it starts
    const start = Math.max(clamp(t.t0), last?.start ?? 0);
    const end = Math.max(start, clamp(t.t1));
    if (last && !/^\s/.test(t.text)) {
      last.word += t.text;
      last.end = Math.max(last.end, end);
    } else {
      words.push({ word: t.text.trim(), start, end });
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
