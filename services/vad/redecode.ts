import { AppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import type { TranscribeResult, WorkerRouter } from "../../shared/workers/types";
import { endOfSentenceFromMark } from "../../domain/sessions/end-of-turn";
import type { AcquireOptions, AheadFinal, StreamDecoderPool, StreamHypothesis, StreamUtterance } from "./stream-decoders";
import { waitQueue } from "./wait-queue";

/**
 * Partials for engines that decode whole clips (whisper.cpp, an OpenAI-compatible
 * upstream): the open item's audio decoded again, whole, through the worker router each
 * time its running hypothesis is read (every partial_interval_ms of new speech, and
 * during a pause for semantic_vad). It stands where a streaming PocketSphinx decoder
 * stands (the same StreamUtterance), so the stable-prefix rule, interims, the semantic
 * end of turn and the shaping are the streaming path's (stream-items.ts, turn-taking.ts).
 *
 * - At most one re-decode in flight per item: a read asked for while one runs waits for
 *   it and then decodes what has come since (reads asked for meanwhile share that one).
 * - A re-decode is `partial` to the router: it goes only to a warm worker with a free
 *   slot, else it is dropped (`engine_busy`: no hypothesis this time); never to the
 *   fallback, never retried. Commits are never dropped: they take the commit path.
 * - Once the item is long (TAIL_AFTER_SAMPLES decoded), words two reads in a row agreed
 *   on that ended a second before the decoded audio's end are fixed: later re-decodes
 *   cover only the audio after them, the fixed words as the prompt, and the hypothesis is
 *   the fixed words and the tail's, so each read stays bounded.
 * - The final is not decoded here (`finalByCommit`): at the commit the item goes the
 *   commit path whole (rt-transcriber, with its scheduler, fallback and slots), carrying
 *   the words the deltas sent, which the final keeps (item-transcript.ts).
 * - Unless it was decoded ahead (`ahead`): once a pause in the item is long enough that
 *   the commit is likely (stream-items.ts `watchAhead`), the whole item is decoded as a
 *   final is (not `partial`: whisper.cpp's whole window), dropped like a partial when no
 *   engine is free. Speech after it discards it; at the commit it is the final, so the
 *   final comes an engine's decode time sooner (a whole decode after the commit made a
 *   300 ms upstream answer 370 ms after speech_stopped). Items long enough to be cut into
 *   pieces (`wholeUnderSamples`) and items with no engine free take the commit path.
 *
 * Word times are reported in 10 ms frames from the item's first sample, as PocketSphinx
 * reports them, so `newlyStable` (streaming.ts) is one rule for both.
 */

/** How far before the decoded audio's end a re-decoded word must end to go out (0.4 s): the last word of a cut clip is the one whole-clip engines revise. */
const REDECODE_SETTLE_FRAMES = 40;
const SAMPLES_PER_FRAME = 160;
/**
 * Past this much decoded audio (10 s) only the unconfirmed tail is decoded: a re-decode
 * then costs about 10 s of audio whatever the item's length (items run to
 * max_utterance_ms, 20 s by default, 30 s at most: whisper's window).
 */
const TAIL_AFTER_SAMPLES = 10 * 16_000;
/** A word is fixed only if it ended this long before the decoded end (1 s). */
const FIX_FRAMES = 100;

interface Word {
  word: string;
  endFrame: number;
}

export interface RedecodePoolOptions {
  router: () => WorkerRouter | undefined;
  /** Items re-decoded at once per VAD process (RT_STREAM_DECODERS); more wait as for a decoder. */
  size: number;
  /** Items shorter than this are decoded whole ahead of their commit; longer ones are cut into pieces by the commit path (SEGMENT_SPLIT_MIN_SECONDS). */
  wholeUnderSamples: number;
  logger?: Logger;
}

export function createRedecodePool(options: RedecodePoolOptions): StreamDecoderPool {
  let open = 0;
  let busy = 0;
  const live = new Set<AbortController>();
  // the time the engines spent on this pool's decodes (ms, counted as each ends), for `engineShare`
  let decodedMs = 0;
  let shareFrom = { at: performance.now(), decodedMs: 0 };
  const timed = <T>(decode: Promise<T>): Promise<T> => {
    const t0 = performance.now();
    return decode.finally(() => (decodedMs += performance.now() - t0));
  };

  // items waiting for a slot, served in the order they asked as slots free (stream-decoders.ts)
  const waiters = waitQueue<{ options: AcquireOptions; granted: (utt: StreamUtterance) => void }>(() => serveWaiters());
  const serveWaiters = () => {
    while (waiters.length && open < options.size) {
      const w = waiters.shift()!;
      w.granted(take(w.options));
    }
  };
  const acquire: StreamDecoderPool["acquire"] = (o) => (open >= options.size || waiters.length ? null : take(o));

  const take = ({ prompt, keyterms, language, model }: AcquireOptions): StreamUtterance => {
    open++;
    const stop = new AbortController();
    live.add(stop);
    let isOpen = true;
    let pcm = new Int16Array(16_000 * 4);
    let fed = 0;
    // the confirmed words of a long item, and the sample after the last of them
    let fixed: Word[] = [];
    let fixedTo = 0;
    let previous: Word[] | null = null;
    let inflight: Promise<StreamHypothesis> | null = null;
    let queued: Promise<StreamHypothesis> | null = null;

    const close = () => {
      if (!isOpen) return;
      isOpen = false;
      open--;
      aheadFinal.discard();
      stop.abort(new AppError("unavailable", "stream_closed", "the item was committed or dropped"));
      live.delete(stop);
      serveWaiters();
    };

    const decode = async (): Promise<StreamHypothesis> => {
      const router = options.router();
      if (!router) throw new AppError("unavailable", "transcription_unavailable", "no worker router");
      const until = fed;
      const context = fixed.length ? [prompt, fixed.map((w) => w.word).join(" ")].filter(Boolean).join(" ") : prompt;
      busy++;
      let r;
      try {
        r = await timed(router.transcribe({
          pcm: pcm.subarray(fixedTo, until),
          prompt: context ?? undefined,
          keyterms: keyterms?.length ? [...keyterms] : undefined,
          language: language ?? undefined,
          partial: true,
          signal: stop.signal,
        }));
      } finally {
        busy--;
      }
      const offset = fixedTo / SAMPLES_PER_FRAME;
      const tail = r.result.words.map((w) => ({ word: w.word.trim(), endFrame: Math.round(offset + w.end * 100) })).filter((w) => w.word !== "");
      const words = [...fixed, ...tail];
      const frames = until / SAMPLES_PER_FRAME;
      fixLongItem(words, frames, until);
      previous = words;
      return { text: words.map((w) => w.word).join(" "), words, frames, endOfSentence: endOfSentenceFromMark(words.at(-1)?.word), formatted: r.formatted };
    };

    /** A long item: the words the last two reads agree on, a second before the end, are fixed (see above). */
    const fixLongItem = (words: Word[], frames: number, until: number) => {
      if (!previous || until - fixedTo < TAIL_AFTER_SAMPLES) return;
      let n = fixed.length;
      while (n < words.length && n < previous.length && words[n]!.word === previous[n]!.word && words[n]!.endFrame <= frames - FIX_FRAMES) n++;
      if (n === fixed.length) return;
      fixed = words.slice(0, n);
      fixedTo = Math.min(until, fixed.at(-1)!.endFrame * SAMPLES_PER_FRAME);
    };

    const hypothesis = (): Promise<StreamHypothesis> => {
      if (!isOpen) return Promise.resolve({ text: "", words: [], frames: 0, endOfSentence: null });
      if (!inflight) {
        inflight = decode().finally(() => (inflight = null));
        return inflight;
      }
      // one in flight: the next read waits for it, then hears what came since
      queued ??= inflight
        .catch(() => undefined)
        .then(() => {
          queued = null;
          return hypothesis();
        });
      return queued;
    };

    // the item decoded whole during the pause starting at `pauseFrom` (see above)
    let prepared: { pauseFrom: number; samples: number; stop: AbortController; result: Promise<TranscribeResult> } | null = null;
    const aheadFinal: AheadFinal = {
      prepare(pauseFrom, samples) {
        if (!isOpen || prepared?.pauseFrom === pauseFrom) return;
        aheadFinal.discard();
        const router = options.router();
        if (!router || samples > fed || samples >= options.wholeUnderSamples) return;
        const stopAhead = new AbortController();
        const request = { pcm: pcm.subarray(0, samples), prompt: prompt ?? undefined, keyterms: keyterms?.length ? [...keyterms] : undefined, language: language ?? undefined, model: model ?? undefined };
        const result = timed(router.transcribe({ ...request, ahead: true, signal: stopAhead.signal }));
        result.catch(() => undefined); // taken or discarded; a failure means the commit path
        prepared = { pauseFrom, samples, stop: stopAhead, result };
      },
      discard() {
        prepared?.stop.abort(new AppError("unavailable", "speech_resumed", "the item goes on past the pause"));
        prepared = null;
      },
      take(samples) {
        const p = prepared;
        if (p?.samples !== samples) {
          aheadFinal.discard();
          return null;
        }
        prepared = null;
        return p.result;
      },
    };

    const utterance: StreamUtterance = {
      pid: -1,
      lost: false,
      settleFrames: REDECODE_SETTLE_FRAMES,
      finalByCommit: true,
      feed(more) {
        if (!isOpen || more.length === 0) return;
        if (fed + more.length > pcm.length) {
          const grown = new Int16Array(Math.max(pcm.length * 2, fed + more.length));
          grown.set(pcm.subarray(0, fed));
          pcm = grown;
        }
        pcm.set(more, fed);
        fed += more.length;
      },
      hypothesis,
      end() {
        close();
        return Promise.reject(new AppError("internal", "stream_closed", "a re-decoded item's final comes from the commit path"));
      },
      abort: close,
      ahead: aheadFinal,
    };
    return utterance;
  };

  return {
    acquire,
    endsItems: false,
    wait: (o, granted) => waiters.add({ options: o, granted }),
    stats: () => ({ busy, size: options.size, processes: 0, pids: [], speakers: open }),
    // a decode holds one of the engines' slots (the clips the warm workers take at once) for its time
    engineShare() {
      const now = performance.now();
      const slots = Math.max(1, options.router()?.capacity?.().requests ?? 1);
      const share = (decodedMs - shareFrom.decodedMs) / Math.max(1, (now - shareFrom.at) * slots);
      shareFrom = { at: now, decodedMs };
      return Math.min(1, share);
    },
    async close() {
      for (const c of live) c.abort(new AppError("unavailable", "engine_closed", "the VAD is stopping"));
      live.clear();
    },
  };
}
