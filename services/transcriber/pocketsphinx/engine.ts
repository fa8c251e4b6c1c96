import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { killWithUs } from "../../../shared/process-guard";
import { processStat } from "../../../shared/proc-cpu";
import { availableParallelism } from "node:os";
import { createInterface } from "node:readline";
import { z } from "zod";
import type { TranscriptSegment, TranscriptWord, VerboseTranscription } from "../../../schemas/transcription";
import { AppError } from "../../../shared/errors";
import type { Logger } from "../../../shared/logger";
import type { EngineRequest, TranscriptionEngine } from "../../../shared/workers/types";
import { segmentFromWords } from "../segments";
import { ensurePocketsphinxBinary } from "../../../shared/pocketsphinx/build";
import { pocketsphinxPrompt } from "../../../shared/workers/keyterms";

/**
 * The embedded engine: a pool of persistent ps-worker processes (PocketSphinx 0.8,
 * Debian's en-us model). Each process loads the model once and then serves clips one
 * at a time over stdin/stdout, so no request pays a model load; the pool is sized to
 * the cores and requests queue for a free process. A process that dies is replaced,
 * and the clip it held goes to the next free process (once: a clip that kills a second
 * process fails with a retryable error).
 *
 * A process that is alive but frozen (stopped, swapped out, wedged) would hold a clip
 * until the router's attempt times out, and then every later clip it is handed. So each
 * clip is preceded by a ping (a streaming HYP request, which ps-worker answers at once
 * when no stream is open) and the process must answer it within `acceptTimeoutMs`
 * (WORKER_ATTEMPT_TIMEOUT_MS, the spec's 800 ms): one that does not, and is stopped or
 * got no CPU at all meanwhile (/proc/<pid>/stat; one that ran is only starved by the
 * machine's load and gets another period), is left out of the pool and the clip goes
 * back to the head of the queue for the next process, within the same attempt (unless
 * it is the last process in rotation: then the clip waits on it). A clip whose caller's deadline passes while a process decodes it is
 * failed then (nobody waits for it) and that process is left out too. A process left
 * out returns once it has answered everything it was sent (it ran again); meanwhile
 * the engine is warm only while some process is in rotation.
 */
export interface PocketsphinxOptions {
  binary?: string;
  modelDir?: string;
  /** Processes in the pool (default: available cores). */
  processes?: number;
  /** PocketSphinx decoder options over ps-worker's built-in ones (default COMMIT_DECODER_OPTIONS). */
  decoderOptions?: string[];
  /** Declared real-time factor for the router's timeout rule. */
  realTimeFactor?: number;
  /** How long a process may take to take a clip (answer the ping ahead of it); default 800 ms. */
  acceptTimeoutMs?: number;
  models?: string[];
  logger?: Logger;
}

/**
 * The commit path's decoder settings, on top of ps-worker's built-in ones: at most 5 word
 * exits and 4,000 active HMMs per frame (instead of 20 and 5,000), a seventh less CPU at
 * the same word error rate on the labelled clips, whole and cut into utterances as the
 * realtime plane cuts them. Narrower word-exit beams save more at the same WER but change
 * ldc93s1.wav's words, which the embedded reviewer's evaluation is calibrated on (the
 * table and why: docs/benchmarks/segment.md, "The embedded engine's settings"; bench/engine-cost.ts).
 */
export const COMMIT_DECODER_OPTIONS = ["-maxwpf", "5", "-maxhmmpf", "4000"];

const MAGIC = 0x31535350;
const SAMPLE_RATE = 16_000;
/** A streaming HYP request with no payload: answered at once while no stream is open. */
const PING = (() => {
  const b = Buffer.alloc(12);
  b.writeUInt32LE(0x32535350, 0);
  b.writeUInt32LE(3, 4);
  b.writeUInt32LE(0, 8);
  return b;
})();

const psOutput = z.union([
  z.object({
    segments: z.array(z.object({ words: z.array(z.object({ w: z.string(), s: z.number(), e: z.number(), p: z.number().optional() })) })),
  }),
  z.object({ error: z.string() }),
]);
type PsOutput = z.infer<typeof psOutput>;

interface Job {
  request: EngineRequest;
  /** Given to another process once already, after the first died holding it. */
  redone?: boolean;
  resolve: (r: VerboseTranscription) => void;
  reject: (e: unknown) => void;
}

interface Proc {
  child: ChildProcessWithoutNullStreams;
  ready: boolean;
  current?: Job;
  onLine?: (line: string) => void;
  /** Lines still owed for clips given up on; the process is out of rotation until they came. */
  owed: number;
  /** When the process was left out of rotation (absent while in it). */
  leftOutAt?: number;
}

export async function createPocketsphinxEngine(options: PocketsphinxOptions = {}): Promise<TranscriptionEngine> {
  const binary = options.binary ?? (await ensurePocketsphinxBinary());
  const size = Math.max(1, options.processes ?? availableParallelism());
  const acceptTimeoutMs = options.acceptTimeoutMs ?? 800;
  const modelDir = options.modelDir ?? "/usr/share/pocketsphinx/model/en-us";
  const procs: Proc[] = [];
  const queue: Job[] = [];
  let closed = false;

  const spawnProc = (): Promise<Proc> =>
    new Promise((resolveReady, rejectReady) => {
      const child = spawn(binary, [modelDir, ...(options.decoderOptions ?? COMMIT_DECODER_OPTIONS)], { stdio: ["pipe", "pipe", "pipe"] });
      killWithUs(child);
      const proc: Proc = { child, ready: false, owed: 0 };
      child.stderr.resume();
      child.stdin.on("error", () => undefined);
      const lines = createInterface({ input: child.stdout });
      lines.on("line", (line) => {
        if (!proc.ready) {
          if (line.includes('"ready":true')) {
            proc.ready = true;
            resolveReady(proc);
            pump();
          } else rejectReady(new Error(`ps-worker failed to start: ${line}`));
          return;
        }
        if (proc.owed > 0) {
          // an answer to a clip given up on: the process runs again once all have come
          if (--proc.owed === 0 && proc.leftOutAt !== undefined) {
            options.logger?.warn("pocketsphinx process answered again; back in rotation", { pid: child.pid, leftOutMs: Date.now() - proc.leftOutAt });
            proc.leftOutAt = undefined;
            pump();
          }
          return;
        }
        proc.onLine?.(line);
      });
      child.on("error", rejectReady);
      child.on("exit", (code, signal) => {
        const idx = procs.indexOf(proc);
        if (idx >= 0) procs.splice(idx, 1);
        if (!proc.ready) rejectReady(new Error(`ps-worker exited during start (code ${code})`));
        const job = proc.current;
        proc.current = undefined;
        proc.onLine = undefined;
        if (job && !closed && !job.redone) {
          // The process died under the clip (killed, out of memory): the next process takes
          // it, once; a clip that kills a second process fails.
          job.redone = true;
          options.logger?.warn("pocketsphinx process exited holding a clip; the next process takes it", { code, signal });
          queue.unshift(job);
          pump();
        } else job?.reject(new AppError("unavailable", "engine_crashed", `pocketsphinx process exited (${signal ?? code})`));
        if (!closed) {
          options.logger?.warn("pocketsphinx process exited; replacing it", { code, signal });
          spawnProc().then((p) => procs.push(p)).catch((e) => options.logger?.error("pocketsphinx restart failed", { err: e }));
        }
      });
    });

  const inRotation = (p: Proc) => p.ready && p.leftOutAt === undefined;

  /**
   * Gives up on `proc`'s clip: the answers still to come for it are owed (and dropped),
   * and the process is out of rotation until they came. The last process in rotation
   * stays in (a process answers in order, so a next clip only queues behind the owed
   * answers): leaving it out would leave clips nowhere to go.
   */
  const giveUp = (proc: Proc, owed: number, why: string) => {
    proc.owed += owed;
    proc.current = undefined;
    proc.onLine = undefined;
    if (!procs.some((p) => p !== proc && inRotation(p))) {
      options.logger?.warn(`pocketsphinx process ${why}; kept in rotation as the last one`, { pid: proc.child.pid });
      return;
    }
    proc.leftOutAt ??= Date.now();
    options.logger?.warn(`pocketsphinx process ${why}; left out of rotation until it answers`, { pid: proc.child.pid, inRotation: procs.filter(inRotation).length });
  };

  const pump = () => {
    for (const proc of procs) {
      if (!inRotation(proc) || proc.current) continue;
      const job = queue.shift();
      if (!job) return;
      if (job.request.signal?.aborted) {
        job.reject(job.request.signal.reason ?? new Error("aborted"));
        continue;
      }
      run(proc, job);
    }
  };

  const run = (proc: Proc, job: Job) => {
    proc.current = job;
    const { pcm, prompt, keyterms, signal } = job.request;
    let taken = false;
    const done = () => {
      clearTimeout(acceptTimer);
      signal?.removeEventListener("abort", onAbort);
    };
    let ranBefore = processStat(proc.child.pid);
    // No answer to the ping in time. Judged after pending I/O (setImmediate): a busy
    // event loop runs this timer before reading a ping answer that already came.
    const onAcceptTimeout = () =>
      setImmediate(() => {
        if (proc.current !== job || taken) return;
        // The last process in rotation is waited on: leaving it out would leave the clip
        // nowhere to go (on an overloaded machine every ping can be late).
        if (!procs.some((p) => p !== proc && inRotation(p))) return;
        // A process that got CPU meanwhile is alive, only starved by the machine's load:
        // give it another period. Stopped, or no CPU at all for the whole period: frozen.
        const now = processStat(proc.child.pid);
        if (now && ranBefore && now.state !== "T" && now.state !== "t" && now.ticks > ranBefore.ticks) {
          ranBefore = now;
          acceptTimer = setTimeout(onAcceptTimeout, acceptTimeoutMs);
          return;
        }
        done();
        giveUp(proc, 2, `did not take a clip within ${acceptTimeoutMs} ms`);
        queue.unshift(job);
        pump();
      });
    let acceptTimer = setTimeout(onAcceptTimeout, acceptTimeoutMs);
    // The caller's deadline passed: nobody waits for this clip any more.
    const onAbort = () => {
      if (proc.current !== job) return;
      done();
      giveUp(proc, taken ? 1 : 2, "still held a clip at its caller's deadline");
      job.reject(signal!.reason ?? new Error("aborted"));
      pump();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    proc.onLine = (line) => {
      if (!taken) {
        taken = true; // the ping's answer: the clip is being decoded
        clearTimeout(acceptTimer);
        return;
      }
      done();
      proc.current = undefined;
      proc.onLine = undefined;
      try {
        job.resolve(toVerbose(psOutput.parse(JSON.parse(line)), pcm.length / SAMPLE_RATE));
      } catch (err) {
        job.reject(err instanceof AppError ? err : new AppError("internal", "engine_bad_output", "pocketsphinx produced unreadable output", { cause: err }));
      }
      pump();
    };
    const promptBytes = Buffer.from(pocketsphinxPrompt(prompt, keyterms), "utf8");
    const head = Buffer.alloc(12);
    head.writeUInt32LE(MAGIC, 0);
    head.writeUInt32LE(pcm.length, 4);
    head.writeUInt32LE(promptBytes.length, 8);
    proc.child.stdin.write(PING);
    proc.child.stdin.write(head);
    if (promptBytes.length) proc.child.stdin.write(promptBytes);
    proc.child.stdin.write(Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength));
  };

  procs.push(...(await Promise.all(Array.from({ length: size }, spawnProc))));

  return {
    kind: "pocketsphinx",
    formatsText: false,
    models: options.models ?? ["stt-1", "pocketsphinx-en-us"],
    languages: ["en"],
    realTimeFactor: options.realTimeFactor ?? 2,
    // the processes in rotation: a frozen one takes no clips, so it is not announced
    get concurrency() {
      return Math.max(1, procs.filter(inRotation).length);
    },
    warm: () => !closed && procs.some(inRotation),
    transcribe(request) {
      if (closed) return Promise.reject(new AppError("unavailable", "engine_closed", "the engine is shutting down"));
      if (request.pcm.length === 0) return Promise.resolve(toVerbose({ segments: [] }, 0));
      return new Promise((resolve, reject) => {
        queue.push({ request, resolve, reject });
        request.signal?.addEventListener("abort", () => {
          const i = queue.findIndex((j) => j.request === request);
          if (i >= 0) queue.splice(i, 1)[0]!.reject(request.signal!.reason ?? new Error("aborted"));
        }, { once: true });
        pump();
      });
    },
    async close() {
      closed = true;
      for (const job of queue.splice(0)) job.reject(new AppError("unavailable", "engine_closed", "the engine is shutting down"));
      await Promise.all(
        procs.map(
          (p) =>
            new Promise<void>((done) => {
              p.child.once("exit", () => done());
              p.child.stdin.end();
              setTimeout(() => p.child.kill("SIGKILL"), 2000).unref();
            }),
        ),
      );
    },
  };
}

/** Engine output → verbose_json: one segment per detected utterance. */
function toVerbose(out: PsOutput, durationSeconds: number): VerboseTranscription {
  if ("error" in out) throw new AppError("internal", "engine_error", `pocketsphinx: ${out.error}`);
  const round = (x: number) => Math.round(x * 100) / 100;
  const clamp = (x: number) => Math.min(Math.max(0, x), durationSeconds);
  const words: TranscriptWord[] = [];
  const segments: TranscriptSegment[] = [];
  for (const utt of out.segments) {
    if (utt.words.length === 0) continue;
    // a word without "p": the final pass found no path and the first pass's words stand (ps-worker.c end_utterance)
    const ws = utt.words.map((w) => ({ word: w.w, start: round(clamp(w.s)), end: round(clamp(Math.max(w.e, w.s))), ...(w.p === undefined ? {} : { probability: w.p }) }));
    words.push(...ws);
    const known = ws.flatMap((w) => (w.probability === undefined ? [] : [w.probability]));
    const logp = known.length ? known.reduce((acc, p) => acc + Math.log(Math.max(p, 1e-6)), 0) / known.length : 0;
    segments.push(segmentFromWords(segments.length, ws, Math.round(logp * 1000) / 1000));
  }
  return {
    task: "transcribe",
    language: "en",
    duration: Math.round(durationSeconds * 1000) / 1000,
    text: segments.map((s) => s.text.trim()).join(" "),
    segments,
    words,
  };
}
