import { loadFvad } from "./fvad";
import { VAD_TRAILING_MS, type TurnDetection } from "../../schemas/realtime";
import { createPcmPool, type PcmPool } from "./pcm-pool";
import { quietestCut } from "./quiet-cut";

/**
 * Streaming server-side voice activity detection: WebRTC VAD (libfvad compiled to WASM,
 * about 0.01 ms per 30 ms frame here) classifies 30 ms frames of 16 kHz mono PCM16, and a
 * small state machine turns those decisions into speech_started / speech_stopped and
 * utterances (the audio to transcribe).
 *
 * - Start: at least `threshold` of the last 10 frames (300 ms) voiced. The utterance
 *   begins `prefix_padding_ms` before the first voiced frame of that window.
 * - Stop: `silence_duration_ms` of consecutive unvoiced frames. The utterance ends at
 *   the end of the last voiced frame plus up to 200 ms of trailing audio.
 * - `max_utterance_ms` cuts a long utterance at its quietest 100 ms of the last 3 s
 *   (quiet-cut.ts), and speech continues in a new one from there.
 * - `commit()` ends an open utterance now; `clear()` drops it.
 *
 * Times are milliseconds on the session's audio timeline (sample 0 = first sample the
 * client sent). The segmenter is synchronous and pure apart from the WASM VAD state; one
 * instance per session, fed in order.
 */
export const VAD_SAMPLE_RATE = 16000;
const FRAME_SAMPLES = 480; // 30 ms at 16 kHz
const FRAME_MS = 30;
const WINDOW_FRAMES = 10;
/** A session's audio buffer to start with (0.5 s; it grows while someone speaks). */
const BUFFER_SAMPLES = 8192;
/** The most an utterance's buffer is sized for up front (10 s); longer ones grow. */
const RESERVE_MAX_SAMPLES = 10 * VAD_SAMPLE_RATE;
/**
 * What a session's first utterance is sized for up front (2 s), as the later ones are
 * for the one before: growing each session's first utterance from the silent buffer
 * took new buffers by the thousand when many sessions started at once.
 */
const FIRST_UTTERANCE_GUESS_SAMPLES = 2 * VAD_SAMPLE_RATE;
/** Room for this many samples past the recent audio while silent (0.3 s: a move every ten frames). */
const SILENT_SLACK_SAMPLES = 4800;

/** `type` matters only when `manual`: every frame counts as voiced (the client commits). */
type VadSettings = Pick<TurnDetection, "threshold" | "prefix_padding_ms" | "silence_duration_ms" | "aggressiveness" | "max_utterance_ms"> & { type?: TurnDetection["type"] };

export type UtteranceEndReason = "vad" | "commit" | "max_length" | "close";

export type VadEvent =
  | { kind: "speech_started"; audioStartMs: number }
  | { kind: "speech_stopped"; audioEndMs: number }
  | {
      kind: "utterance";
      audioStartMs: number;
      audioEndMs: number;
      /** A view of a buffer from the process's pool: valid until `release`. */
      pcm: Int16Array;
      reason: UtteranceEndReason;
      /**
       * Hands the buffer back for other sessions' audio, once nothing reads `pcm` any more
       * (its publish acknowledged). Optional: a buffer never released is collected.
       */
      release?(): void;
    };

export interface VadSegmenter {
  /**
   * Feeds samples; `offsetSamples` (timeline position of pcm[0]) realigns after gaps
   * and skips audio already consumed (redeliveries).
   */
  push(pcm: Int16Array, offsetSamples?: number): VadEvent[];
  /** Ends the open utterance now (client commit); [] when no speech is open. */
  commit(reason?: UtteranceEndReason): VadEvent[];
  /** Drops the open utterance and the buffered audio. */
  clear(): void;
  update(settings: VadSettings): void;
  /** Ends the open utterance as enough silence would (a semantic end of turn); [] when none is open. */
  endTurn(): VadEvent[];
  /**
   * A copy of the open utterance's whole frames from timeline sample `from` on; null
   * when no utterance is open or `from` is outside it.
   */
  openAudio(from: number): Int16Array | null;
  /** Like `openAudio`, from the utterance's start when `from` is before it; `from`: where the copy starts. Null when none is open. */
  openTail(from: number): { from: number; pcm: Int16Array } | null;
  /** The open utterance's current pause: where its silence began and how long it is (samples); null while voiced. */
  readonly pause: { fromSample: number; samples: number } | null;
  readonly speaking: boolean;
  /** Samples consumed so far (timeline position of the next sample). */
  readonly position: number;
  /** Frees the native VAD state. */
  close(): void;
}


export interface VadEngine {
  createSegmenter(settings: VadSettings): VadSegmenter;
}

let engine: Promise<VadEngine> | undefined;

/** Loads the WASM VAD once per process. */
export function loadVadEngine(): Promise<VadEngine> {
  engine ??= loadFvad().then((m) => {
    const frame = m._malloc(FRAME_SAMPLES * 2);
    const pool = createPcmPool();
    const classify = (handle: number, samples: Int16Array): boolean => {
      m.HEAP16.set(samples, frame >> 1);
      return m._fvad_process(handle, frame, FRAME_SAMPLES) === 1;
    };
    return {
      createSegmenter: (settings) => {
        const handle = m._fvad_new();
        if (!handle) throw new Error("fvad_new failed");
        m._fvad_set_sample_rate(handle, VAD_SAMPLE_RATE);
        return createSegmenterOver(
          {
            classify: (s) => classify(handle, s),
            setMode: (mode) => m._fvad_set_mode(handle, mode),
            free: () => m._fvad_free(handle),
          },
          settings,
          pool,
        );
      },
    };
  });
  return engine;
}

interface FrameClassifier {
  classify(frame: Int16Array): boolean;
  setMode(mode: number): void;
  free(): void;
}

/** Milliseconds on a session's timeline → samples at VAD_SAMPLE_RATE. */
export const msToSamples = (ms: number) => Math.round((ms * VAD_SAMPLE_RATE) / 1000);
const samplesToMs = (samples: number) => Math.round((samples * 1000) / VAD_SAMPLE_RATE);

function createSegmenterOver(vad: FrameClassifier, initial: VadSettings, pool: PcmPool): VadSegmenter {
  let settings = initial;
  vad.setMode(settings.aggressiveness);

  const partial = new Int16Array(FRAME_SAMPLES);
  let partialLen = 0;
  let position = 0; // timeline sample index of the next sample to arrive
  let framesStart = 0; // timeline sample index of `partial[0]`

  // The session's recent audio, one buffer on its timeline: while silent the last few
  // frames (for the prefix padding), while speaking the open utterance from its start.
  // (A copy per 30 ms frame, as before, was 33,000 small arrays a second at 1,000
  // sessions for the garbage collector.) While silent, audio before `keepFrom` is
  // forgotten but moved out only when the buffer fills (moving the recent 0.6 s down on
  // every frame was most of the segmenter's own work).
  let buf = pool.take(BUFFER_SAMPLES);
  let bufStart = 0; // timeline sample of buf[0]
  let bufLen = 0;
  let keepFrom = 0; // while silent: the oldest timeline sample still kept
  // Voicing of the latest frames while silent (the start window): a ring of at most
  // WINDOW_FRAMES, oldest at `winHead`.
  const winStart = new Float64Array(WINDOW_FRAMES);
  const winVoiced = new Uint8Array(WINDOW_FRAMES);
  let winHead = 0;
  let winLen = 0;
  let winVoicedCount = 0;
  // Open utterance.
  let speaking = false;
  let uttStart = 0;
  let lastVoicedEnd = 0;
  let silentRun = 0;
  let floor = 0; // no new utterance may start before this sample (end of the previous one)
  let lastUtteranceSamples = FIRST_UTTERANCE_GUESS_SAMPLES;

  const recentCapacity = () => (WINDOW_FRAMES + Math.ceil(settings.prefix_padding_ms / FRAME_MS) + 1) * FRAME_SAMPLES;
  const keptStart = () => Math.max(bufStart, keepFrom);

  const clearWindow = () => {
    winHead = 0;
    winLen = 0;
    winVoicedCount = 0;
  };
  const pushWindow = (start: number, voiced: boolean) => {
    if (winLen === WINDOW_FRAMES) {
      winVoicedCount -= winVoiced[winHead]!;
      winHead = (winHead + 1) % WINDOW_FRAMES;
      winLen--;
    }
    const at = (winHead + winLen) % WINDOW_FRAMES;
    winStart[at] = start;
    winVoiced[at] = voiced ? 1 : 0;
    winVoicedCount += voiced ? 1 : 0;
    winLen++;
  };
  const firstVoicedInWindow = () => {
    for (let k = 0; k < winLen; k++) {
      const at = (winHead + k) % WINDOW_FRAMES;
      if (winVoiced[at]) return winStart[at]!;
    }
    return -1;
  };

  const append = (pcm: Int16Array, start: number) => {
    // while silent a gap on the timeline starts the buffer afresh; while speaking the
    // utterance's samples stay contiguous
    if (bufLen === 0 || (!speaking && start !== bufStart + bufLen)) {
      bufStart = start;
      bufLen = 0;
      keepFrom = start;
    }
    if (bufLen + pcm.length > buf.length) {
      if (!speaking) dropBefore(keptStart());
      if (bufLen + pcm.length > buf.length) {
        // by a quarter (not doubling): what a speaking session holds is mostly its audio;
        // silent, with room for a few frames more so the next move is some frames away
        const slack = speaking ? 0 : SILENT_SLACK_SAMPLES;
        moveTo(pool.take(Math.max(Math.ceil(buf.length * 1.25), bufLen + pcm.length + slack)));
      }
    }
    buf.set(pcm, bufLen);
    bufLen += pcm.length;
  };
  /** Continues in `next` (from the pool), handing the current buffer back. */
  const moveTo = (next: Int16Array) => {
    next.set(buf.subarray(0, bufLen));
    pool.give(buf);
    buf = next;
  };
  /** Forgets the audio before timeline sample `at`. */
  function dropBefore(at: number) {
    const k = Math.min(Math.max(0, at - bufStart), bufLen);
    if (k === 0) return;
    buf.copyWithin(0, k, bufLen);
    bufLen -= k;
    bufStart += k;
  }

  const startUtterance = (start: number) => {
    speaking = true;
    uttStart = start;
    dropBefore(start);
    if (bufLen === 0) bufStart = start;
    // room for an utterance as long as the last one, at once: growing by a quarter from
    // the silent buffer took eight new arrays for a 3 s utterance (four times its size in
    // allocations; ArrayBuffers are external memory, whose churn sets off V8's collections)
    const expected = Math.min(RESERVE_MAX_SAMPLES, Math.ceil(lastUtteranceSamples * 1.25));
    if (expected > buf.length) moveTo(pool.take(expected));
    clearWindow();
    silentRun = 0;
  };

  const endUtterance = (endAt: number, reason: UtteranceEndReason, out: VadEvent[]) => {
    const keep = Math.max(0, Math.min(bufLen, endAt - uttStart));
    lastUtteranceSamples = keep;
    // The utterance leaves in the buffer it was gathered in; the session goes on in one
    // sized for silence, with the audio after the end point as prefix padding for the
    // next utterance.
    const uttBuf = buf;
    const pcm = uttBuf.subarray(0, keep);
    const after = uttBuf.subarray(keep, bufLen);
    buf = pool.take(Math.max(BUFFER_SAMPLES, after.length, recentCapacity() + SILENT_SLACK_SAMPLES));
    buf.set(after);
    bufLen = after.length;
    bufStart = uttStart + keep;
    keepFrom = bufStart;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      pool.give(uttBuf);
    };
    clearWindow();
    for (let at = bufStart; at < bufStart + bufLen; at += FRAME_SAMPLES) pushWindow(at, false);
    speaking = false;
    floor = uttStart + keep;
    out.push({ kind: "speech_stopped", audioEndMs: samplesToMs(uttStart + keep) }, { kind: "utterance", audioStartMs: samplesToMs(uttStart), audioEndMs: samplesToMs(uttStart + keep), pcm, reason, release });
  };

  const onFrame = (frame: Int16Array, start: number, out: VadEvent[]) => {
    const manual = settings.type === "manual";
    const voiced = manual || vad.classify(frame);
    append(frame, start);
    if (!speaking) {
      keepFrom = Math.max(keepFrom, bufStart + bufLen - recentCapacity());
      pushWindow(start, voiced);
      if (voiced && (manual || winVoicedCount >= Math.ceil(settings.threshold * WINDOW_FRAMES))) {
        const begin = Math.max(floor, firstVoicedInWindow() - msToSamples(settings.prefix_padding_ms), keptStart());
        startUtterance(begin);
        lastVoicedEnd = start + frame.length;
        out.push({ kind: "speech_started", audioStartMs: samplesToMs(begin) });
      }
      return;
    }
    if (voiced) {
      lastVoicedEnd = start + frame.length;
      silentRun = 0;
    } else silentRun += frame.length;
    if (silentRun >= msToSamples(settings.silence_duration_ms)) {
      endUtterance(Math.min(start + frame.length, lastVoicedEnd + msToSamples(VAD_TRAILING_MS)), "vad", out);
    } else if (bufLen >= msToSamples(settings.max_utterance_ms)) {
      const cut = quietestCut(buf, bufStart, uttStart + msToSamples(1000), start + frame.length);
      endUtterance(cut, "max_length", out);
      // still speaking: continue in a new utterance from the cut point
      startUtterance(cut);
      lastVoicedEnd = cut;
      out.push({ kind: "speech_started", audioStartMs: samplesToMs(cut) });
    }
  };

  return {
    push(input, offsetSamples) {
      let pcm = input;
      const events: VadEvent[] = [];
      if (offsetSamples !== undefined && offsetSamples < position) {
        // Audio already consumed (a redelivered message): keep only what is new.
        if (offsetSamples + pcm.length <= position) return events;
        pcm = pcm.subarray(position - offsetSamples);
      } else if (offsetSamples !== undefined && offsetSamples > position) {
        // A gap (lost audio or a restarted consumer): drop the partial frame and realign.
        partialLen = 0;
        position = offsetSamples;
        framesStart = offsetSamples;
      }
      let i = 0;
      while (i < pcm.length) {
        const take = Math.min(FRAME_SAMPLES - partialLen, pcm.length - i);
        partial.set(pcm.subarray(i, i + take), partialLen);
        partialLen += take;
        i += take;
        if (partialLen === FRAME_SAMPLES) {
          onFrame(partial, framesStart, events);
          framesStart += FRAME_SAMPLES;
          partialLen = 0;
        }
      }
      position += pcm.length;
      return events;
    },
    commit(reason = "commit") {
      if (!speaking) return [];
      // include the partial frame so a commit right after speech keeps its tail
      if (partialLen > 0) {
        append(partial.subarray(0, partialLen), framesStart);
        framesStart += partialLen;
        partialLen = 0;
      }
      const events: VadEvent[] = [];
      endUtterance(uttStart + bufLen, reason, events);
      return events;
    },
    clear() {
      speaking = false;
      bufLen = 0;
      clearWindow();
      silentRun = 0;
      floor = position;
    },
    update(next) {
      settings = next;
      vad.setMode(next.aggressiveness);
    },
    endTurn() {
      const events: VadEvent[] = [];
      if (speaking) endUtterance(Math.min(framesStart, lastVoicedEnd + msToSamples(VAD_TRAILING_MS)), "vad", events);
      return events;
    },
    openAudio(from) {
      if (!speaking || from < bufStart || from > bufStart + bufLen) return null;
      return buf.slice(from - bufStart, bufLen);
    },
    openTail(from) {
      if (!speaking) return null;
      const at = Math.min(Math.max(from, bufStart), bufStart + bufLen);
      return { from: at, pcm: buf.slice(at - bufStart, bufLen) };
    },
    get pause() {
      return speaking && silentRun > 0 ? { fromSample: lastVoicedEnd, samples: silentRun } : null;
    },
    get speaking() {
      return speaking;
    },
    get position() {
      return position;
    },
    close() {
      vad.free();
    },
  };
}
