import type { TranscriptSegment, TranscriptWord, VerboseTranscription } from "../../schemas/transcription";
import { MAX_CHUNKS, quietestPoint, slicesFromCuts, type SlicePlan } from "../jobs/slicing";

/**
 * A long segment-plane clip cut into pieces that free engines decode at once, and the
 * pieces' results put back together (docs/design/segment.md, "Long clips in parallel").
 *
 * Which clips: one shorter than `splitMinSeconds`, or with fewer than two engine slots
 * free to take pieces, is one piece: the single-request path, unchanged.
 *
 * Cutting (`planPieces`): at the clip's pauses, into more pieces than slots, so that the
 * engines' work can be balanced. A pause is a stretch of at least 250 ms quieter than
 * the clip's own speech (`findPauses`: 20 ms frames, quiet below a quarter of the way
 * from the clip's noise floor to its speech level, in dB; digital silence counts as
 * quiet). The clip is walked from its start: each piece ends at the pause nearest
 * `target` seconds on (D / (k × slots), at least `minPieceSeconds`, at most
 * `maxPieceSeconds`), keeping every piece at least `minPieceSeconds` long; with no pause
 * in reach the piece runs on to the next pause, and only a piece that would pass
 * `maxPieceSeconds` is cut without one, at the quietest 200 ms before that length (the
 * batch slicing's `quietestPoint`). At most MAX_CHUNKS pieces (the longest piece grows).
 * Where the pauses fall decides how evenly pieces share out, so the plan is made for k =
 * 4, 6 and 8 pieces per slot and the one whose schedule (below, in estimated cost) ends
 * first is kept, the fewer pieces unless more end at least 1% sooner.
 *
 * Balancing: each piece carries an estimate of what it costs the engine (`cost`: its
 * voiced seconds plus a quarter of its length, since pauses decode cheaply but not for
 * free), and `dispatchOrder` hands them to the engines costliest first. A free engine
 * takes the next piece as it finishes one, so that is longest-processing-time-first list
 * scheduling: each engine's total ends within about the smallest piece of the others'.
 *
 * Stitching: a piece's times are seconds from its own start; `placePiece` moves them by
 * the piece's exact start (its first sample ÷ 16 000) and keeps them inside the piece,
 * `stitchPieces` concatenates the placed pieces in order, numbers segments from 0 and
 * keeps word and segment starts monotonic. Formatting is the caller's, on the result.
 */
export interface PiecePolicy {
  /** Clips shorter than this (seconds) keep the single-request path. */
  splitMinSeconds: number;
  /** The longest piece (seconds), unless the cap on pieces raises it. */
  maxPieceSeconds: number;
  /** The shortest piece (seconds): no cut leaves less than this on either side. */
  minPieceSeconds: number;
}

/** A planned piece: its samples and its estimated decoding cost (voiced seconds + a quarter of its length). */
export interface PiecePlan extends SlicePlan {
  cost: number;
}

/** A piece's place in the clip and what its engine answered (times from the piece's start). */
export interface PieceResult {
  startSample: number;
  endSample: number;
  result: VerboseTranscription;
}

const SAMPLE_RATE = 16_000;
const FRAME = 320; // 20 ms
const MIN_PAUSE_FRAMES = 13; // 260 ms
/** Pieces per engine slot the planner tries (it keeps the best balanced plan). */
const PIECES_PER_SLOT = [4, 6, 8];
const SILENCE_COST = 0.25;
/** A sample within this of zero is digital silence (padding, a dither's last bit). */
const DIGITAL_SILENCE = 2;
/** Digital silence at a clip's edge this long or longer is padding (as long as a pause). */
const MIN_PADDING = 0.25 * SAMPLE_RATE;
/** How far from each edge padding is looked for. */
const MAX_PADDING = 30 * SAMPLE_RATE;
const ms = (x: number) => Math.round(x * 1000) / 1000;

/** A pause: frames [start, end) of 20 ms, all quiet. */
interface Pause {
  startFrame: number;
  endFrame: number;
}

/** Each 20 ms frame's level in dB (0 for digital silence). */
function frameLevels(pcm: Int16Array): Float64Array {
  const frames = Math.floor(pcm.length / FRAME);
  const db = new Float64Array(frames);
  for (let f = 0; f < frames; f++) {
    let sum = 0;
    for (let i = f * FRAME; i < (f + 1) * FRAME; i++) sum += pcm[i]! * pcm[i]!;
    db[f] = 10 * Math.log10(sum / FRAME + 1);
  }
  return db;
}

/** The level below which a frame is quiet: a quarter of the way from the noise floor to the speech level. */
function quietLevel(db: Float64Array): number {
  // digital silence (padding, joins) says nothing about the recording's noise floor
  const heard = [...db].filter((x) => x > 10).sort((a, b) => a - b);
  if (heard.length === 0) return 10;
  const floor = heard[Math.floor(heard.length * 0.1)]!;
  const speech = heard[Math.floor(heard.length * 0.95)]!;
  return floor + (speech - floor) / 4;
}

/** The pauses of 16 kHz `pcm`: runs of at least 260 ms of quiet frames. */
export function findPauses(pcm: Int16Array): { pauses: Pause[]; voiced: Uint8Array } {
  const db = frameLevels(pcm);
  const quiet = quietLevel(db);
  const voiced = new Uint8Array(db.length);
  const pauses: Pause[] = [];
  let run = 0;
  for (let f = 0; f <= db.length; f++) {
    if (f < db.length && db[f]! <= quiet) {
      run++;
      continue;
    }
    if (f < db.length) voiced[f] = 1;
    if (run >= MIN_PAUSE_FRAMES) pauses.push({ startFrame: f - run, endFrame: f });
    run = 0;
  }
  return { pauses, voiced };
}

/** How long each piece of a clip of `durationSeconds` should be with `slots` engines, `perSlot` pieces each. */
export function targetPieceSeconds(durationSeconds: number, slots: number, policy: PiecePolicy, perSlot = PIECES_PER_SLOT[0]!): number {
  const longest = Math.max(policy.maxPieceSeconds, durationSeconds / MAX_CHUNKS);
  return Math.min(longest, Math.max(policy.minPieceSeconds, durationSeconds / (perSlot * slots)));
}

/**
 * The pieces of 16 kHz `pcm`: contiguous, cut at pauses, covering its speech, between
 * its first and last 20 ms frame that is not digital silence when 250 ms or more of it
 * pad the clip (one piece: all of it).
 * Padding (a channel of a stereo file padded to the longer one, zeros before or after)
 * is neither planned nor decoded: it moves no cut, and the engine, whose cepstral mean
 * a second of zeros shifts, hears the same speech the same way with or without it.
 */
export function planPieces(pcm: Int16Array, slots: number, policy: PiecePolicy): PiecePlan[] {
  const [from, to] = speechBounds(pcm);
  return planSpeech(pcm.subarray(from, to), slots, policy).map((p) => ({ ...p, startSample: p.startSample + from, endSample: p.endSample + from }));
}

/**
 * Samples [from, to) of `pcm` between its first and last 20 ms frame holding more than
 * digital silence, where the silence before or after is padding (at least MIN_PADDING);
 * the whole clip when it is all silence.
 */
function speechBounds(pcm: Int16Array): [number, number] {
  const heard = (f: number) => {
    for (let i = f * FRAME; i < Math.min(pcm.length, (f + 1) * FRAME); i++) if (pcm[i]! > DIGITAL_SILENCE || pcm[i]! < -DIGITAL_SILENCE) return true;
    return false;
  };
  // padding is looked for within MAX_PADDING of each edge only: a long silent clip costs
  // no scan of its hours on the request's path (it is planned whole, as before)
  const frames = Math.ceil(pcm.length / FRAME);
  const reach = Math.min(frames, Math.ceil(MAX_PADDING / FRAME));
  let first = 0;
  while (first < reach && !heard(first)) first++;
  if (first === reach) return [0, pcm.length];
  let last = frames - 1;
  while (last > first && last >= frames - reach && !heard(last)) last--;
  if (last < frames - reach) return [first * FRAME < MIN_PADDING ? 0 : first * FRAME, pcm.length];
  // a few milliseconds of zeros at a recording's edge are the recording's: only padding goes
  const from = first * FRAME < MIN_PADDING ? 0 : first * FRAME;
  const to = pcm.length - (last + 1) * FRAME < MIN_PADDING ? pcm.length : (last + 1) * FRAME;
  return [from, to];
}

function planSpeech(pcm: Int16Array, slots: number, policy: PiecePolicy): PiecePlan[] {
  const duration = pcm.length / SAMPLE_RATE;
  if (slots < 2 || duration < policy.splitMinSeconds || duration <= 0) return [{ index: 0, startSample: 0, endSample: pcm.length, cost: duration }];
  const { pauses, voiced } = findPauses(pcm);
  // a cut goes to the middle of a pause
  const candidates = pauses.map((p) => Math.round(((p.startFrame + p.endFrame) / 2) * FRAME));
  const costed = (slice: SlicePlan): PiecePlan => {
    let frames = 0;
    for (let f = Math.floor(slice.startSample / FRAME); f < Math.floor(slice.endSample / FRAME); f++) frames += voiced[f] ?? 0;
    const seconds = (slice.endSample - slice.startSample) / SAMPLE_RATE;
    return { ...slice, cost: ms((frames * FRAME) / SAMPLE_RATE + SILENCE_COST * seconds) };
  };
  // the plan whose costliest-first schedule on `slots` engines ends first; the fewer pieces when within 1%
  let best: { pieces: PiecePlan[]; makespan: number } | undefined;
  for (const perSlot of PIECES_PER_SLOT) {
    const cuts = cutsNear(pcm, candidates, targetPieceSeconds(duration, slots, policy, perSlot), policy);
    const pieces = slicesFromCuts(pcm.length, cuts).map(costed);
    const makespan = scheduleEnd(pieces, slots);
    if (!best || makespan < best.makespan * 0.99) best = { pieces, makespan };
  }
  return best!.pieces;
}

/** Cuts from the clip's start, each at the pause nearest `targetSeconds` on (see above). */
function cutsNear(pcm: Int16Array, candidates: readonly number[], targetSeconds: number, policy: PiecePolicy): number[] {
  const s = (seconds: number) => Math.round(seconds * SAMPLE_RATE);
  const duration = pcm.length / SAMPLE_RATE;
  const target = s(targetSeconds);
  const longest = s(Math.max(policy.maxPieceSeconds, duration / MAX_CHUNKS));
  const shortest = s(Math.min(policy.minPieceSeconds, duration / 2));
  const cuts: number[] = [];
  let start = 0;
  while (pcm.length - start > longest || pcm.length - start >= target + shortest) {
    const lo = start + shortest;
    const hi = Math.min(start + longest, pcm.length - shortest);
    let best = -1;
    for (const c of candidates) {
      if (c < lo || c > hi) continue;
      if (best < 0 || Math.abs(c - (start + target)) < Math.abs(best - (start + target))) best = c;
    }
    if (best < 0) {
      if (pcm.length - start <= longest) break;
      // no pause within the longest piece: the quietest 200 ms of its last 4 s
      const window = { targetSample: start + longest, startSample: Math.max(lo, start + longest - s(4)), endSample: start + longest };
      best = quietestPoint(pcm.subarray(window.startSample, window.endSample), window, SAMPLE_RATE);
    }
    cuts.push(best);
    start = best;
  }
  return cuts;
}

/** When the last of `slots` engines would finish `pieces` handed out costliest first (in estimated cost). */
export function scheduleEnd(pieces: readonly PiecePlan[], slots: number): number {
  const loads = new Array<number>(slots).fill(0);
  for (const p of dispatchOrder(pieces)) {
    const free = loads.indexOf(Math.min(...loads));
    loads[free]! += p.cost;
  }
  return Math.max(...loads);
}

/**
 * How a runner of pieces (shared/workers/pieces-run.ts) cuts a clip for `slots()` engines
 * under `policy`: the plan, handed to the engines costliest first, or in clip order
 * (`inOrder`: a streamed answer's text comes in that order).
 */
export function pieceCutter(policy: PiecePolicy, inOrder = false) {
  return (pcm: Int16Array, slots: () => number) => {
    // a clip shorter than splitMinSeconds is one piece on any number of engines: they are not counted
    const plan = planPieces(pcm, pcm.length < policy.splitMinSeconds * SAMPLE_RATE ? 1 : slots(), policy);
    return { plan, order: inOrder ? plan : dispatchOrder(plan) };
  };
}

/** The order to hand `pieces` to the engines: costliest first (ties in clip order). */
export function dispatchOrder(pieces: readonly PiecePlan[]): PiecePlan[] {
  return [...pieces].sort((a, b) => b.cost - a.cost || a.index - b.index);
}

/** A piece's result on the clip's timeline: times moved by its start, kept inside it. */
export function placePiece(piece: PieceResult): VerboseTranscription {
  const offset = piece.startSample / SAMPLE_RATE;
  const end = piece.endSample / SAMPLE_RATE;
  const at = (t: number) => ms(Math.min(end, Math.max(offset, offset + t)));
  const words: TranscriptWord[] = piece.result.words.map((w) => ({ ...w, start: at(w.start), end: at(Math.max(w.end, w.start)) }));
  // an engine that answered text without segments: the piece is its segment
  const given = piece.result.segments.length || !piece.result.text.trim() ? piece.result.segments : [wholePiece(piece.result.text, end - offset)];
  const segments: TranscriptSegment[] = given.map((s) => ({
    ...s,
    // whisper counts seek in 10 ms frames from the start of the audio
    seek: s.seek + Math.round(offset * 100),
    start: at(s.start),
    end: at(Math.max(s.end, s.start)),
  }));
  return { ...piece.result, duration: ms(end - offset), segments, words };
}

function wholePiece(text: string, seconds: number): TranscriptSegment {
  return { id: 0, seek: 0, start: 0, end: seconds, text: ` ${text.trim()}`, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 };
}

/**
 * The pieces' results as one transcription of the whole clip (`durationSeconds` long),
 * in piece order: segments numbered from 0, word and segment starts never going back.
 * One piece is returned as its engine answered.
 */
export function stitchPieces(pieces: readonly PieceResult[], durationSeconds: number): VerboseTranscription {
  if (pieces.length === 1 && pieces[0]!.startSample === 0) return pieces[0]!.result;
  const ordered = [...pieces].sort((a, b) => a.startSample - b.startSample);
  const segments: TranscriptSegment[] = [];
  const words: TranscriptWord[] = [];
  let lastSegmentStart = 0;
  let lastWordStart = 0;
  for (const placed of ordered.map(placePiece)) {
    for (const s of placed.segments) {
      const start = Math.max(s.start, lastSegmentStart);
      segments.push({ ...s, id: segments.length, start, end: Math.max(s.end, start) });
      lastSegmentStart = start;
    }
    for (const w of placed.words) {
      const start = Math.max(w.start, lastWordStart);
      words.push({ ...w, start, end: Math.max(w.end, start) });
      lastWordStart = start;
    }
  }
  const texts = ordered.map((p) => p.result.text.trim()).filter(Boolean);
  return {
    task: "transcribe",
    language: ordered.find((p) => p.result.language)?.result.language ?? "en",
    duration: ms(durationSeconds),
    text: texts.join(" "),
    segments,
    words,
  };
}
