import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { killWithUs } from "../../shared/process-guard";
import { createInterface } from "node:readline";
import { z } from "zod";
import { AppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import { ensurePocketsphinxBinary } from "../../shared/pocketsphinx/build";
import { pocketsphinxPrompt } from "../../shared/workers/keyterms";
import { SETTLE_FRAMES } from "./streaming";
import { waitQueue } from "./wait-queue";
import type { TranscribeResult } from "../../shared/workers/types";

/**
 * A bounded local pool of streaming PocketSphinx decoders (ps-worker processes speaking
 * the PSS2 streaming protocol, see ps-worker.c), held by the VAD service so the
 * partition owner feeds each open utterance's audio as it reads it from JetStream.
 *
 * One process decodes one utterance at a time. `acquire` never waits: with no free
 * decoder (or others already waiting for one) it returns null, and the item queues with
 * `wait`: decoders that free go to the waiting items in the order they asked, at once
 * (stream-items.ts), so no item is starved by others that happened to ask at the moment
 * a decoder freed. Processes are
 * spawned up to `size`: a few at start, then one spare ahead of demand whenever the
 * last idle one is taken (a model load is 0.44 CPU-s), and they stay warm. A process that dies fails its utterance (`lost`, and the pending
 * hypothesis/end promises reject) and is replaced.
 *
 * The flat-lexicon second pass is off (-fwdflat no; the lattice best path stays on):
 * ending an utterance then costs 10–60 ms instead of 200 ms–2 s on the labelled clips.
 * Figures: docs/design/realtime.md, "Streaming recognition".
 */
const MAGIC_STREAM = 0x32535350;
const OP = { start: 1, audio: 2, hyp: 3, end: 4 } as const;
/**
 * -mmap yes: the mixture weights are mapped from the model file and shared by every
 * decoder process (about 25 MB private per process instead of 80 MB; same output).
 * -ds 2: Gaussians scored every other frame. -maxhmmpf 2000 -maxwpf 5 -pbeam 1e-40: at
 * most 2,000 active HMMs and 5 word exits per frame, a narrower phone-transition beam;
 * about a third less CPU than the -maxhmmpf 3000 used before (0.05 against 0.07–0.09
 * CPU-s per audio second) at the same word error rate on the labelled clips, whole
 * (34.6%) and cut into utterances as the plane cuts them (42/104 words). The table:
 * docs/design/realtime.md, "Streaming recognition" (`bench/engine-cost.ts`).
 */
/**
 * Audio goes to a decoder in pieces of at least this many samples (120 ms), and before
 * every hypothesis read and the end. A decoder woken for every 30 ms VAD frame spends
 * half as much again on the same audio (jfk.wav paced at real time: 0.117 CPU-s per audio
 * second fed every 30 ms, 0.078 every 120 ms, 0.079 every 300 ms; the whole clip at once
 * 0.08): each wake starts from cold caches. Partials and finals do not wait for it,
 * since reads flush first.
 */
const FEED_GRAIN_SAMPLES = 1_920;
export const STREAM_DECODER_OPTIONS = ["-fwdflat", "no", "-mmap", "yes", "-ds", "2", "-maxhmmpf", "2000", "-maxwpf", "5", "-pbeam", "1e-40"];

const endOutput = z.union([
  z.object({
    segments: z.array(z.object({ words: z.array(z.object({ w: z.string(), s: z.number(), e: z.number(), p: z.number().optional() })) })),
    cmn: z.array(z.number()),
  }),
  z.object({ error: z.string() }),
]);
const hypOutput = z.object({ hyp: z.string(), frames: z.number(), words: z.array(z.tuple([z.string(), z.number()])), eos: z.number().optional() });

/** The running first-pass hypothesis: its text, each word's end frame, and the frames decoded so far (100 per second of voiced audio). */
export interface StreamHypothesis {
  text: string;
  words: { word: string; endFrame: number }[];
  frames: number;
  /** log10 P(</s> | the last two words) from the language model (re-decoded items: from the last word's mark); null without words (or a last word it lacks). */
  endOfSentence: number | null;
  /** The engine's words come punctuated and cased (re-decoded items on whisper.cpp or an upstream): no smart formatting. */
  formatted?: boolean;
}

interface StreamWord {
  word: string;
  /** Seconds from the utterance's first fed sample. */
  start: number;
  end: number;
  /** Absent when the decoder's final pass found no path and its first pass's words stand (ps-worker.c end_utterance). */
  probability?: number;
}

export interface StreamResult {
  words: StreamWord[];
  /** The CMN estimate the utterance ended with: the session's next utterance starts from it. */
  cmn: number[];
}

export interface StreamUtterance {
  /** Process id of the decoder (tests kill it). */
  readonly pid: number;
  /** The decoder died while this utterance held it. */
  readonly lost: boolean;
  /** How many 10 ms frames before the decoded audio's end a word must end to go out in a delta (streaming.ts `newlyStable`). */
  readonly settleFrames: number;
  /** The final is the commit path's (the item decoded whole, keeping the words sent), not `end()`'s (redecode.ts). */
  readonly finalByCommit: boolean;
  feed(pcm: Int16Array): void;
  /** The running first-pass hypothesis. */
  hypothesis(): Promise<StreamHypothesis>;
  /** Ends the utterance: its words with timings; frees the decoder. */
  end(): Promise<StreamResult>;
  /** Drops the utterance (clear, handover, session end); frees the decoder. */
  abort(): void;
  /** A final decoded ahead of the commit, during the pause that will likely end the item (redecode.ts); absent: streaming decoders, whose end is the final. */
  readonly ahead?: AheadFinal;
}

/**
 * The item's final decoded during the pause that will likely end it, so the final is
 * ready when the VAD commits instead of a whole decode after it (redecode.ts).
 */
export interface AheadFinal {
  /** The pause starting at timeline sample `pauseFrom` fixes where the item will end: decode its first `samples` whole now (once per pause). */
  prepare(pauseFrom: number, samples: number): void;
  /** Speech resumed: the decode no longer holds the whole item. */
  discard(): void;
  /** At the commit of an item of `samples`: the decode prepared for exactly that audio, or null (the commit path decodes it). */
  take(samples: number): Promise<TranscribeResult> | null;
}

export interface StreamDecoderPool {
  /** A decoder for a new utterance, or null when every one is busy or items already wait for one. */
  acquire(options: AcquireOptions): StreamUtterance | null;
  /**
   * Queues for the next decoder that frees (first come, first served): `granted` is called
   * with it as soon as one does. Returns the cancel (the item ended or was dropped).
   */
  wait(options: AcquireOptions, granted: (utt: StreamUtterance) => void): () => void;
  /** Its utterances' `end()` gives the item's final (streaming decoders); false: the commit path does (re-decodes, redecode.ts). */
  readonly endsItems: boolean;
  /**
   * Decoders busy / allowed, and the pids of the live decoder processes (their CPU is the
   * engine's load); `speakers`: the utterances still open (acquired, not yet ended or
   * dropped), the speakers still talking, where `busy` also counts a decoder finishing
   * an utterance already committed.
   */
  stats(): { busy: number; size: number; processes: number; pids: number[]; speakers: number };
  /**
   * The share of the engine this pool's decodes took since the last call, for pools whose
   * engine is not a process here (re-decodes through the router, redecode.ts): their
   * decodes' time over the engines' slots. Absent: the decoders' CPU (`pids`) is measured.
   */
  engineShare?(): number;
  close(): Promise<void>;
}

export interface AcquireOptions {
  prompt: string | null;
  keyterms?: readonly string[] | null;
  cmn: number[] | null;
  language?: string | null;
  /** The session's model preference (the router's choice of worker). */
  model?: string | null;
}

export interface StreamDecoderPoolOptions {
  size: number;
  /** Processes started before the first utterance (default min(2, size)). */
  warm?: number;
  binary?: string;
  modelDir?: string;
  /** PocketSphinx options (default STREAM_DECODER_OPTIONS; the bench compares others). */
  decoderOptions?: string[];
  logger?: Logger;
}

interface Proc {
  child: ChildProcessWithoutNullStreams;
  busy: boolean;
  dead: boolean;
  /** Callbacks for the responses still to come, in request order. */
  waiting: { resolve: (line: string) => void; reject: (e: Error) => void }[];
  onDeath?: () => void;
}

export async function createStreamDecoderPool(options: StreamDecoderPoolOptions): Promise<StreamDecoderPool> {
  const binary = options.binary ?? (await ensurePocketsphinxBinary());
  const modelDir = options.modelDir ?? "/usr/share/pocketsphinx/model/en-us";
  const procs: Proc[] = [];
  let closed = false;
  let speakers = 0;

  const spawnProc = (): Proc => {
    const child = spawn(binary, [modelDir, ...(options.decoderOptions ?? STREAM_DECODER_OPTIONS)], { stdio: ["pipe", "pipe", "pipe"] });
    killWithUs(child);
    const proc: Proc = { child, busy: false, dead: false, waiting: [] };
    let ready = false;
    child.stderr.resume();
    child.stdin.on("error", () => undefined);
    createInterface({ input: child.stdout }).on("line", (line) => {
      if (!ready) {
        ready = line.includes('"ready":true');
        if (!ready) options.logger?.warn("stream decoder failed to start", { line: line.slice(0, 200) });
        return;
      }
      proc.waiting.shift()?.resolve(line);
    });
    child.on("error", () => undefined);
    child.on("exit", (code, signal) => {
      proc.dead = true;
      const at = procs.indexOf(proc);
      if (at >= 0) procs.splice(at, 1);
      const err = new AppError("unavailable", "engine_crashed", `stream decoder exited (${signal ?? code})`);
      for (const w of proc.waiting.splice(0)) w.reject(err);
      proc.onDeath?.();
      if (!closed) options.logger?.warn("stream decoder exited; a new one is started on demand", { code, signal });
      // replace the warm ones right away; the rest come back on demand
      if (!closed && procs.length < warmCount) procs.push(spawnProc());
      if (!closed) serveWaiters();
    });
    return proc;
  };

  const send = (proc: Proc, op: number, payload?: Uint8Array) => {
    const head = Buffer.alloc(12);
    head.writeUInt32LE(MAGIC_STREAM, 0);
    head.writeUInt32LE(op, 4);
    head.writeUInt32LE(payload?.byteLength ?? 0, 8);
    proc.child.stdin.write(head);
    if (payload?.byteLength) proc.child.stdin.write(payload);
  };
  const ask = (proc: Proc, op: number): Promise<string> =>
    new Promise((resolve, reject) => {
      if (proc.dead) return reject(new AppError("unavailable", "engine_crashed", "stream decoder is gone"));
      proc.waiting.push({ resolve, reject });
      send(proc, op);
    });

  const warmCount = Math.min(options.warm ?? 2, options.size);
  for (let i = 0; i < warmCount; i++) procs.push(spawnProc());

  const waiters = waitQueue<{ options: AcquireOptions; granted: (utt: StreamUtterance) => void }>(() => serveWaiters());
  const freeProc = (): Proc | null => {
    const idle = procs.find((p) => !p.busy && !p.dead);
    if (idle) return idle;
    if (procs.length >= options.size) return null;
    const fresh = spawnProc(); // the model loads while the first audio waits in the pipe
    procs.push(fresh);
    return fresh;
  };
  /** Hands the free decoders to the waiting items, longest waiting first. */
  const serveWaiters = () => {
    while (!closed && waiters.length) {
      const proc = freeProc();
      if (!proc) return;
      const w = waiters.shift()!;
      const utt = take(proc, w.options);
      try {
        w.granted(utt);
      } catch {
        utt.abort();
      }
    }
  };

  const acquire: StreamDecoderPool["acquire"] = (o) => {
    if (closed || waiters.length) return null;
    const proc = freeProc();
    return proc && take(proc, o);
  };

  const take = (p: Proc, { prompt, keyterms, cmn }: AcquireOptions): StreamUtterance => {
    p.busy = true;
    speakers++;
    // keep one spare loaded ahead of demand, so the next utterance does not wait for a model load
    if (procs.length < options.size && !procs.some((x) => !x.busy && !x.dead)) procs.push(spawnProc());
    let lost = false;
    let open = true;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    const flush = () => {
      if (!pendingBytes) return;
      send(p, OP.audio, pending.length === 1 ? pending[0] : Buffer.concat(pending, pendingBytes));
      pending = [];
      pendingBytes = 0;
    };
    p.onDeath = () => {
      lost = true;
    };
    const promptBytes = Buffer.from(pocketsphinxPrompt(prompt, keyterms), "utf8");
    const n = cmn?.length ?? 0;
    const start = Buffer.alloc(4 + n * 4 + promptBytes.length);
    start.writeUInt32LE(n, 0);
    for (let i = 0; i < n; i++) start.writeFloatLE(cmn![i]!, 4 + i * 4);
    promptBytes.copy(start, 4 + n * 4);
    send(p, OP.start, start);
    const finish = () =>
      ask(p, OP.end).finally(() => {
        p.onDeath = undefined;
        p.busy = false;
        serveWaiters();
      });
    return {
      pid: p.child.pid ?? -1,
      settleFrames: SETTLE_FRAMES,
      finalByCommit: false,
      get lost() {
        return lost;
      },
      feed(pcm) {
        if (!open || lost || pcm.length === 0) return;
        // a copy: the caller's view may be reused before the piece is sent
        pending.push(Buffer.from(new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength)));
        pendingBytes += pcm.byteLength;
        if (pendingBytes >= FEED_GRAIN_SAMPLES * 2) flush();
      },
      async hypothesis() {
        if (!open) return { text: "", words: [], frames: 0, endOfSentence: null };
        flush();
        const out = hypOutput.parse(JSON.parse(await ask(p, OP.hyp)));
        return { text: out.hyp, words: out.words.map(([word, endFrame]) => ({ word, endFrame })), frames: out.frames, endOfSentence: out.eos ?? null };
      },
      async end() {
        if (!open) throw new AppError("internal", "stream_closed", "the utterance was already ended");
        flush();
        open = false;
        speakers--;
        const out = endOutput.parse(JSON.parse(await finish()));
        if ("error" in out) throw new AppError("internal", "engine_error", `pocketsphinx: ${out.error}`);
        const words = out.segments.flatMap((s) => s.words.map((w) => ({ word: w.w, start: w.s, end: Math.max(w.e, w.s), ...(w.p === undefined ? {} : { probability: w.p }) })));
        return { words, cmn: out.cmn };
      },
      abort() {
        if (!open) return;
        open = false;
        speakers--;
        pending = [];
        pendingBytes = 0;
        void finish().catch(() => undefined);
      },
    };
  };

  return {
    acquire,
    endsItems: true,
    wait: (o, granted) => waiters.add({ options: o, granted }),
    stats: () => ({ busy: procs.filter((p) => p.busy).length, size: options.size, processes: procs.length, pids: procs.flatMap((p) => (p.child.pid && !p.dead ? [p.child.pid] : [])), speakers }),
    async close() {
      closed = true;
      await Promise.all(
        procs.map(
          (p) =>
            new Promise<void>((done) => {
              if (p.dead) return done();
              p.child.once("exit", () => done());
              p.child.stdin.end();
              setTimeout(() => p.child.kill("SIGKILL"), 2000).unref();
            }),
        ),
      );
    },
  };
}
