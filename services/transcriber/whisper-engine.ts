import { constants } from "node:fs";
import { access, stat } from "node:fs/promises";
import { availableParallelism } from "node:os";
import type { TranscriptSegment, TranscriptWord, VerboseTranscription } from "../../schemas/transcription";
import { AppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import type { EngineRequest, TranscriptionEngine } from "../../shared/workers/types";
import { segmentFromWords } from "./segments";
import { checkWhisperModelFile, type WhisperModelInfo } from "./whisper-model-file";
import { promptWithKeyterms } from "../../shared/workers/keyterms";
import { audioCtxFor, startWhisperProcess, type WhisperProcess } from "./whisper-process";

/**
 * whisper.cpp in a persistent process of its own (whisper-process.ts: whisper.cpp
 * built from its sources for this machine's CPU). Enabled when the operator sets
 * WHISPER_MODEL_PATH to a ggml model file; the service never downloads weights. The
 * file is checked (whisper-model-file.ts), then loaded once at start and kept.
 *
 * Several clips at once: `parallel` decoder states over the one loaded model
 * (WHISPER_PARALLEL), each decoding on `threads` threads (WHISPER_THREADS); by default
 * one state per two cores, with the cores shared out among them. The worker announces
 * that concurrency to the router.
 *
 * Settings, and why:
 * - greedy decoding at temperature 0 (beam search costs about 5× for a point or two of
 *   word error rate; the hosted APIs' defaults are greedy too);
 * - word timings: one token per segment with token timestamps (`max_len 1`, the `-ml 1`
 *   mode of whisper-cli); tokens that do not start with a space continue the previous
 *   word; segments are rebuilt from the words, split after sentence punctuation or a
 *   pause of a second or more;
 * - the temperature fallback (re-decoding a window that looks like a loop at +0.2 up
 *   to 1.0) on for clips, WHISPER_TEMPERATURE_FALLBACK=false turns it off: it is what
 *   keeps a trained model out of loops, and what makes a model with random weights cost
 *   six passes per window;
 * - a partial re-decode (request.partial, services/vad/redecode.ts) runs the encoder
 *   over its own audio only (audioCtxFor): a 2 s buffer does not pay for the 30 s
 *   window. Clips and finals keep the whole window: whisper was trained on 30 s
 *   windows, and a shortened one costs trained models some accuracy.
 *
 * Output is bounded by whisper.cpp itself: it decodes 30 s windows, each at most
 * n_text_ctx / 2 − 4 tokens (220 for the released models). A clip with no speech may
 * come back with no words at all. A clip whose caller's deadline passes is stopped
 * inside whisper.cpp (its abort callback) and answered with the deadline error.
 */
export interface WhisperOptions {
  modelPath: string;
  realTimeFactor?: number;
  /** Clips decoded at once (decoder states over the one model); default: one per two cores. */
  parallel?: number;
  /** Threads per clip; default: the cores shared out among the parallel clips. */
  threads?: number;
  /** whisper's temperature fallback on clips (default true). */
  fallback?: boolean;
  /** OpenMP's wait policy for the decode threads (default PASSIVE: whisper-process.ts says why). */
  ompWaitPolicy?: string;
  models?: string[];
  logger?: Logger;
  /** The worker binary (default build/whisper-worker). */
  binary?: string;
  /**
   * Most text tokens per second of audio a window may decode (absent: whisper's own
   * limit, which a trained model never meets: it ends the window itself). For the
   * benches' models with random weights, which never end one, so a 1 s clip costs what
   * 1 s of speech costs and not a whole window of tokens (bench/whisper-capacity.ts).
   */
  maxTokensPerSecond?: number;
}

export async function createWhisperEngine(options: WhisperOptions): Promise<TranscriptionEngine> {
  const unreadable = await access(options.modelPath, constants.R_OK).then(
    () => stat(options.modelPath).then((s) => (s.isFile() ? undefined : new Error("not a regular file"))),
    (err: Error) => err,
  );
  if (unreadable) throw new AppError("validation", "whisper_model_missing", `WHISPER_MODEL_PATH ${options.modelPath} is not a readable file (${unreadable.message})`, { cause: unreadable });
  const model = await checkWhisperModelFile(options.modelPath);
  const cores = Math.max(1, availableParallelism());
  const parallel = Math.max(1, options.parallel ?? Math.floor(cores / 2));
  const threads = Math.max(1, options.threads ?? Math.floor(cores / parallel));
  const perSecond = options.maxTokensPerSecond;
  const maxTokensFor = (samples: number) => (perSecond ? Math.max(1, Math.ceil((perSecond * samples) / 16_000)) : undefined);
  const proc = await startWhisperProcess({ modelPath: options.modelPath, states: parallel, threads, ompWaitPolicy: options.ompWaitPolicy, binary: options.binary, logger: options.logger });
  options.logger?.info("whisper.cpp model loaded", { modelPath: options.modelPath, nVocab: model.nVocab, multilingual: model.multilingual, parallel, threads, system: proc.system });
  if (!/(CUDA|VULKAN|METAL|SYCL) = 1/i.test(proc.system)) {
    options.logger?.info("whisper.cpp decodes on the CPU: this build has no GPU backend (scripts/build-native.sh builds CUDA where nvcc is installed)", { threads, parallel });
  }
  let closed = false;

  const run = async (request: EngineRequest): Promise<VerboseTranscription> => {
    const duration = request.pcm.length / 16_000;
    const language = whisperLanguage(request.language, model);
    if (request.pcm.length === 0) return assemble([], duration, language === "auto" ? "en" : language);
    const prompt = promptWithKeyterms(request.prompt, request.keyterms);
    let out: Awaited<ReturnType<WhisperProcess["decode"]>>;
    try {
      out = await proc.decode({ pcm: request.pcm, language, prompt: prompt || undefined, audioCtx: request.partial ? audioCtxFor(request.pcm.length) : 0, fallback: options.fallback ?? true, maxTokens: maxTokensFor(request.pcm.length), signal: request.signal });
    } catch (err) {
      if (request.signal?.aborted) throw err;
      throw err instanceof AppError ? err : new AppError("upstream", "whisper_failed", `whisper.cpp: ${(err as Error).message}`, { cause: err });
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
    concurrency: parallel,
    warm: () => !closed,
    transcribe(request) {
      if (closed) return Promise.reject(new AppError("unavailable", "engine_closed", "the engine is shutting down"));
      return run(request);
    },
    async close() {
      closed = true;
      await proc.close();
    },
  };
}

/**
 * The language whisper.cpp is given: the hint's base code ("pt-BR" → "pt") when the
 * model knows it, "auto" (detect) without a hint, "en" for an English-only model
 * (whisper.cpp ignores any other there). A multilingual model given a code it does not
 * know would fail in whisper.cpp (it has no id for it), so
 * such a hint is refused here.
 */
function whisperLanguage(hint: string | undefined, model: WhisperModelInfo): string {
  if (!model.multilingual) return "en";
  if (!hint) return "auto";
  const code = hint.toLowerCase().split(/[-_]/)[0]!;
  if (model.languages.includes(code)) return code;
  throw new AppError("validation", "unsupported_language", `whisper.cpp does not know the language "${hint}"; this model knows ${model.languages.join(", ")}`);
}

/** Token segments (ms) → words → sentence segments (seconds, clamped to the clip). */
export function assemble(tokens: ReadonlyArray<{ text: string; t0: number; t1: number }>, duration: number, language: string): VerboseTranscription {
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
