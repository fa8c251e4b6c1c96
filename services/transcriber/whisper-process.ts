import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { stat } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { AppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import { killWithUs } from "../../shared/process-guard";

/**
 * The whisper-worker process (shared/whisper/whisper-worker.cpp: whisper.cpp built for
 * this machine by scripts/build-native.sh): the model loaded once, `states` clips
 * decoded at once, each on `threads` threads. Requests and answers are matched by id,
 * so answers may come in any order; an aborted request is stopped inside whisper.cpp
 * (its abort callback) and answered at once here. A process that dies fails what it
 * held (retryable: the router gives the clip to another engine or retries) and is
 * started again for the next clip.
 */
interface WhisperDecode {
  pcm: Int16Array;
  language: string;
  prompt?: string;
  /** Encoder frames to run (0: the whole 30 s window); see audioCtxFor. */
  audioCtx: number;
  /** whisper's temperature fallback (re-decode a window that looks like a loop). */
  fallback: boolean;
  /** Most text tokens per window (absent: whisper's own limit; see WhisperOptions.maxTokensPerSecond). */
  maxTokens?: number;
  signal?: AbortSignal;
}

interface WhisperToken {
  text: string;
  /** ms */
  t0: number;
  t1: number;
  /** The window's no-speech probability. */
  ns: number;
}

export interface WhisperProcess {
  decode(d: WhisperDecode): Promise<{ language: string; segments: WhisperToken[] }>;
  /** Decodes in progress or queued in the process. */
  readonly inFlight: number;
  readonly system: string;
  close(): Promise<void>;
}

const here = dirname(fileURLToPath(import.meta.url));
const defaultBinary = resolve(here, "../../build/whisper-worker");
const MAGIC_DECODE = 0x31505357;
const MAGIC_ABORT = 0x32505357;

const answer = z.union([
  z.object({ id: z.number(), lang: z.string(), segments: z.array(z.object({ t0: z.number(), t1: z.number(), text: z.string(), ns: z.number() })) }),
  z.object({ id: z.number(), error: z.string() }),
]);
const readyLine = z.object({ ready: z.literal(true), states: z.number(), threads: z.number(), system: z.string() });

/**
 * whisper's encoder runs over `audio_ctx` frames of 20 ms (1500: the 30 s window). A
 * partial re-decode of a few seconds needs only its own frames: a 2 s buffer then costs
 * a fifteenth of the window's encoder. Rounded up to a multiple of 64 frames (1.28 s)
 * with 64 more as a margin (whisper was trained on whole windows; too tight a context
 * makes the last words come out wrong), the whole window at 28 s and over.
 */
export function audioCtxFor(samples: number): number {
  const frames = Math.ceil(samples / 320);
  const ctx = Math.ceil(frames / 64) * 64 + 64;
  return ctx >= 1400 ? 0 : ctx;
}

interface Pending {
  resolve: (r: { language: string; segments: WhisperToken[] }) => void;
  reject: (e: unknown) => void;
}

export async function startWhisperProcess(options: { modelPath: string; states: number; threads: number; ompWaitPolicy?: string; binary?: string; logger?: Logger }): Promise<WhisperProcess> {
  const binary = options.binary ?? defaultBinary;
  if (!(await stat(binary).catch(() => undefined))) {
    throw new AppError("unavailable", "whisper_worker_missing", `the whisper.cpp worker ${binary} is not built: run scripts/build-native.sh (scripts/setup.sh does)`);
  }
  const pending = new Map<number, Pending>();
  let nextId = 1;
  let closed = false;
  let child: ChildProcessWithoutNullStreams;
  let system = "";

  const launch = () =>
    new Promise<void>((ready, failed) => {
      // OpenMP's threads wait passively between ggml's graph steps: spinning (its default)
      // is fastest on idle cores, but here the cores are shared with the VAD, the gateway
      // and other decodes, and a spinning thread holds a core another one needs. Measured
      // on 2 cores with both busy, jfk.wav on the test model with 2 threads: 15.5–21.8 s
      // spinning, 0.65–1.4 s passive (whisper-cli, same build); about even when idle.
      // (WHISPER_OMP_WAIT_POLICY; the binary is static and needs nothing else from the environment)
      const env = { OMP_WAIT_POLICY: options.ompWaitPolicy ?? "PASSIVE" };
      child = spawn(binary, [options.modelPath, "--states", String(options.states), "--threads", String(options.threads)], { stdio: ["pipe", "pipe", "pipe"], env });
      killWithUs(child);
      child.stdin.on("error", () => undefined);
      child.stderr.resume();
      let started = false;
      const lines = createInterface({ input: child.stdout });
      lines.on("line", (line) => {
        if (!started) {
          const r = readyLine.safeParse(parseLine(line));
          if (!r.success) return failed(new AppError("validation", "whisper_model_invalid", `whisper.cpp could not load ${options.modelPath}: ${line}`));
          started = true;
          system = r.data.system;
          return ready();
        }
        const a = answer.safeParse(parseLine(line));
        if (!a.success) return options.logger?.warn("whisper-worker wrote a line that is no answer", { line: line.slice(0, 200) });
        const p = pending.get(a.data.id);
        if (!p) return; // answered already: aborted here
        pending.delete(a.data.id);
        if ("error" in a.data) p.reject(new AppError("upstream", "whisper_failed", `whisper.cpp: ${a.data.error}`));
        else p.resolve({ language: a.data.lang, segments: a.data.segments });
      });
      child.on("error", failed);
      child.on("exit", (code, signal) => {
        if (!started) return failed(new AppError("validation", "whisper_model_invalid", `whisper.cpp could not load ${options.modelPath} (exit ${code ?? signal})`));
        const lost = [...pending.values()];
        pending.clear();
        for (const p of lost) p.reject(new AppError("unavailable", "whisper_failed", `the whisper.cpp process ended (${code ?? signal}) while it decoded`));
        if (closed) return;
        options.logger?.error("whisper-worker ended; starting another", { code, signal, lost: lost.length });
        launch().catch((err) => options.logger?.error("whisper-worker did not start again", { err }));
      });
    });
  await launch();
  options.logger?.info("whisper.cpp worker started", { states: options.states, threads: options.threads, system });

  return {
    get inFlight() {
      return pending.size;
    },
    get system() {
      return system;
    },
    decode(d) {
      if (d.signal?.aborted) return Promise.reject(d.signal.reason);
      const id = nextId++;
      const language = Buffer.from(d.language, "utf8");
      const prompt = Buffer.from(d.prompt ?? "", "utf8");
      const head = Buffer.alloc(32);
      head.writeUInt32LE(MAGIC_DECODE, 0);
      head.writeUInt32LE(id, 4);
      head.writeUInt32LE(d.pcm.length, 8);
      head.writeInt32LE(d.audioCtx, 12);
      head.writeUInt32LE(d.fallback ? 1 : 0, 16);
      head.writeUInt32LE(d.maxTokens ?? 0, 20);
      head.writeUInt32LE(language.length, 24);
      head.writeUInt32LE(prompt.length, 28);
      const pcm = Buffer.from(d.pcm.buffer, d.pcm.byteOffset, d.pcm.byteLength);
      return new Promise((resolvePromise, rejectPromise) => {
        const abort = () => {
          if (!pending.delete(id)) return;
          const stop = Buffer.alloc(8);
          stop.writeUInt32LE(MAGIC_ABORT, 0);
          stop.writeUInt32LE(id, 4);
          child.stdin.write(stop);
          rejectPromise(d.signal!.reason);
        };
        d.signal?.addEventListener("abort", abort, { once: true });
        const settle = () => d.signal?.removeEventListener("abort", abort);
        pending.set(id, {
          resolve: (r) => (settle(), resolvePromise(r)),
          reject: (e) => (settle(), rejectPromise(e)),
        });
        child.stdin.write(Buffer.concat([head, language, prompt, pcm]));
      });
    },
    async close() {
      closed = true;
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((r) => child.once("exit", () => r()));
      child.stdin.end();
      await exited;
    },
  };
}

function parseLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}
