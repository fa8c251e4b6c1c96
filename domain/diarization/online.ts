import { z } from "zod";
import { logDetCovariance, statsOf, sumStats, type GaussianStats } from "./cluster";
import { speakerSegments } from "./diarize";
import { FEATURE_SAMPLE_RATE, FRAME_HOP_SAMPLES, frameFeatures, type FrameFeatures } from "./features";

const FRAME_SECONDS = FRAME_HOP_SAMPLES / FEATURE_SAMPLE_RATE;

/**
 * Speaker labels while a realtime session is still talking: the embedded diarizer's
 * features and distance (diarize.ts, cluster.ts), one committed item at a time. Each
 * known speaker is a full-covariance Gaussian's sufficient statistics (constant memory:
 * 19 sums and 361 sums of products, whatever the session's length), and the session keeps
 * one more such matrix, how the cepstra vary within a run of one voice (`within`). An
 * item's voiced frames, cut into runs of one speaker, each go to the speaker whose mean
 * lies nearest in that covariance, and join it when it lies close enough or when merging
 * them costs no more than the BIC penalty (as the offline clustering decides); otherwise
 * they start a new speaker, up to `maxSpeakers`. Labels already given never change: when
 * two speakers' Gaussians have grown close enough to merge (one person heard first
 * through two different items), the later label is folded into the earlier one from then
 * on (`mergedInto`), and the item whose labelling folded it says so once (`merged`: the
 * session's `conversation.speaker.merged`).
 *
 * Raw cepstra, not standardized as offline (the session's statistics are not known
 * ahead): the full-covariance likelihood ratio does not change under an affine map of
 * the features, so only the small ridge of `logDetCovariance` sees the difference.
 * Pure: the state is a value the caller keeps (and a resumed session restores).
 */
interface OnlineSpeaker {
  /** speaker_<id>: ids in order of first appearance. */
  id: number;
  stats: GaussianStats;
}

export interface OnlineDiarization {
  speakers: OnlineSpeaker[];
  /** Folded labels: id → the id it speaks as now. */
  mergedInto: Record<number, number>;
  /** Voiced frames heard so far. */
  frames: number;
  /**
   * The session's within-run scatter: every run of a second or more, its frames' sums of
   * products about the run's own mean (dims × dims), pooled, and their degrees of freedom.
   * How the cepstra vary while one person speaks, whoever it is: the yardstick the
   * distance between a run and a speaker is measured in (`distance`).
   */
  within: { df: number; scatter: Float64Array } | null;
}

export interface OnlineBounds {
  /** Never more speakers than this (default 10, the documented bound). */
  maxSpeakers?: number;
  /** Exactly this many are expected: new speakers are started until there are this many, never more. */
  speakers?: number;
  /** The BIC penalty's weight and its per-frame floor, the distance a run joins its nearest speaker within and its slack for short runs (defaults below; bench/diarization.ts --online-set tries others). */
  bicPenalty?: number;
  glrFloor?: number;
  sameSpeakerDistance?: number;
  shortRunSlack?: number;
}

/**
 * λ of the BIC penalty and its per-frame floor. Lower than the offline diarizer's (4 and
 * 0.5, diarize.ts): an item is judged against speakers heard so far, a few seconds of
 * speech each at first, where the penalty per frame is large; at 4 every item joined the
 * first speaker. 1.5 measured best on bench/diarization.ts --online (λ 1: over-counts,
 * 2 and up: under-counts; the floor matters little below 0.3).
 */
const BIC_PENALTY = 1.5;
const GLR_FLOOR = 0.3;
/**
 * A run joins its nearest speaker when their means lie within this `distance` (per
 * dimension, in the session's within-run covariance), plus SHORT_RUN_SLACK for each
 * 1/seconds of the run and of the speaker (a short one's mean is noisy), even where ΔBIC
 * would start a new speaker. Measured on bench/diarization.ts --online, four sets of
 * conversations (seeds 29, 7, 101, 53): rows out of bounds 4 of 24 with ΔBIC alone, 3
 * with this too; 0.25 or 0.35, or a slack of 0 or 0.3: 3–6 (docs/diarization.md).
 */
const SAME_SPEAKER_DISTANCE = 0.3;
const SHORT_RUN_SLACK = 0.15;
/** A run with less speech than this (1 s) is placed with the nearest speaker and does not change the speakers: too few frames for a full covariance. */
const MIN_ITEM_FRAMES = 100;
const DEFAULT_MAX_SPEAKERS = 10;

export const emptyDiarization = (): OnlineDiarization => ({ speakers: [], mergedInto: {}, frames: 0, within: null });

/** The state as plain JSON (a takeover's copy of it: services/vad/session-state.ts). */
export function savedDiarization(state: OnlineDiarization): unknown {
  return { ...state, speakers: state.speakers.map((s) => ({ id: s.id, n: s.stats.n, sum: [...s.stats.sum], outer: [...s.stats.outer] })), within: state.within && { df: state.within.df, scatter: [...state.within.scatter] } };
}

const savedShape = z.object({
  speakers: z
    .array(z.object({ id: z.number().int().nonnegative(), n: z.number().nonnegative(), sum: z.array(z.number()), outer: z.array(z.number()) }))
    .refine((ss) => ss.every((sp) => sp.outer.length === sp.sum.length ** 2), "outer holds dims × dims sums"),
  mergedInto: z.record(z.string(), z.number().int().nonnegative()),
  frames: z.number().nonnegative(),
  within: z.object({ df: z.number().nonnegative(), scatter: z.array(z.number()) }).nullish(),
}).refine((st) => !st.within || st.speakers.every((sp) => sp.outer.length === st.within!.scatter.length) && Number.isInteger(Math.sqrt(st.within.scatter.length)), "the within-run scatter holds dims × dims sums, as each speaker's");

/** The state back from `savedDiarization`'s JSON, or null when it is not one. */
export function restoredDiarization(json: unknown): OnlineDiarization | null {
  const parsed = savedShape.safeParse(json);
  if (!parsed.success) return null;
  const speakers = parsed.data.speakers.map((s) => ({ id: s.id, stats: { n: s.n, sum: Float64Array.from(s.sum), outer: Float64Array.from(s.outer) } }));
  const within = parsed.data.within ? { df: parsed.data.within.df, scatter: Float64Array.from(parsed.data.within.scatter) } : null;
  return { speakers, mergedInto: Object.fromEntries(Object.entries(parsed.data.mergedInto).map(([k, v]) => [Number(k), v])), frames: parsed.data.frames, within };
}

/** An item's voiced cepstra (`dims` values a frame; `voiced`: their 10 ms frame indices), from its PCM and its 30 ms WebRTC VAD decisions (the diarizer's aggressiveness). */
export function itemFrames(pcm: Int16Array, vad: Uint8Array): { z: Float32Array; dims: number; voiced: number[] } {
  const features = frameFeatures(pcm);
  const voiced = voicedFrames(features, vad, 480);
  const { dims, values } = features;
  const z = new Float32Array(voiced.length * dims);
  voiced.forEach((f, i) => z.set(values.subarray(f * dims, (f + 1) * dims), i * dims));
  return { z, dims, voiced };
}

/** The 10 ms frames whose centre lies in a voiced 30 ms VAD frame. */
function voicedFrames(features: FrameFeatures, vad: Uint8Array, vadFrameSamples: number): number[] {
  const keep: number[] = [];
  for (let f = 0; f < features.frames; f++) {
    const centre = f * FRAME_HOP_SAMPLES + 200;
    if (vad[Math.floor(centre / vadFrameSamples)]) keep.push(f);
  }
  return keep;
}

/** A label folded into an earlier one: `from` is never given again, `into` stands for it. */
export interface SpeakerFold {
  from: number;
  into: number;
}

/** A run of one speaker in an item: seconds from the item's start. */
export interface ItemTurn {
  start: number;
  end: number;
  speaker: number;
}

/**
 * An item's speakers: its voiced frames cut where the speaker changes (diarize.ts
 * `speakerSegments`: a turn taken within 500 ms of silence stays in one item), each run
 * labelled in order (`labelItem`). `speaker`: who spoke most of it. `merged`: the labels
 * this item folded (each folded once in a session, so each is reported once); the item
 * is not sent yet, so a run labelled before a fold later in the item carries `into` too.
 */
export function labelItemTurns(
  state: OnlineDiarization,
  frames: { z: Float32Array; dims: number; voiced: number[] },
  bounds: OnlineBounds = {},
): { state: OnlineDiarization; speaker: number | null; turns: ItemTurn[]; merged: SpeakerFold[] } {
  const { z, dims, voiced } = frames;
  const runs: (ItemTurn & { frames: number })[] = [];
  const merged: SpeakerFold[] = [];
  for (const g of speakerSegments(z, dims, voiced)) {
    const r = labelItem(state, z.subarray(g.from * dims, g.to * dims), dims, bounds);
    state = r.state;
    if (r.folded) merged.push(r.folded);
    if (r.speaker === null) continue;
    runs.push({ start: voiced[g.from]! * FRAME_SECONDS, end: (voiced[g.to - 1]! + 1) * FRAME_SECONDS, speaker: r.speaker, frames: g.to - g.from });
  }
  const turns: ItemTurn[] = [];
  const spoken = new Map<number, number>();
  for (const run of runs) {
    const speaker = speakingAs(state, run.speaker);
    spoken.set(speaker, (spoken.get(speaker) ?? 0) + run.frames);
    const last = turns.at(-1);
    if (last && last.speaker === speaker) last.end = run.end;
    else turns.push({ start: run.start, end: run.end, speaker });
  }
  const speaker = [...spoken.entries()].sort((a, b) => b[1] - a[1])[0]?.[0] ?? null;
  return { state, speaker, turns, merged };
}

/** The label a speaker id goes by now: itself, or where its folds lead. */
function speakingAs(state: OnlineDiarization, id: number): number {
  let at = id;
  while (state.mergedInto[at] !== undefined) at = state.mergedInto[at]!;
  return at;
}

/**
 * The speaker of the next run, from its voiced frames (`dims` values each), and the state
 * after it: the speaker nearest by `distance` (with oracle speaker models that placed
 * 1,231 of 1,239 runs of a second or more right), joined when close enough for its
 * length or when merging them costs no more than the BIC penalty, else a new speaker.
 */
function labelItem(state: OnlineDiarization, z: Float32Array, dims: number, bounds: OnlineBounds = {}): { state: OnlineDiarization; speaker: number | null; folded?: SpeakerFold } {
  const n = Math.floor(z.length / dims);
  if (n === 0) return { state, speaker: null };
  const item = statsOf(z, dims, 0, n);
  const max = Math.min(bounds.speakers ?? Infinity, bounds.maxSpeakers ?? DEFAULT_MAX_SPEAKERS);
  const live = state.speakers.filter((s) => state.mergedInto[s.id] === undefined);
  const frames = state.frames + n;
  const learns = n >= MIN_ITEM_FRAMES;
  const within = learns ? pooled(state.within, item, dims) : state.within;
  // the yardstick heard before this run (its own scatter would pull it towards itself), once there is a second of it
  const yardstick = state.within && state.within.df >= MIN_ITEM_FRAMES ? state.within : within;
  const precision = yardstick ? withinPrecision(yardstick, dims) : null;
  let best: OnlineSpeaker | undefined;
  let bestDistance = Infinity;
  for (const s of live) {
    const d = precision ? distance(s.stats, item, precision, dims) : 0;
    if (d < bestDistance) [best, bestDistance] = [s, d];
  }
  if (!learns) {
    // too short to judge or to learn from: the nearest speaker, or the first
    if (best) return { state: { ...state, frames }, speaker: best.id };
    const first = { id: state.speakers.length, stats: item };
    return { state: { ...state, speakers: [...state.speakers, first], frames }, speaker: first.id };
  }
  const penalty = 0.5 * (dims + (dims * (dims + 1)) / 2) * Math.log(Math.max(2, frames)) * (bounds.bicPenalty ?? BIC_PENALTY);
  const floor = bounds.glrFloor ?? GLR_FLOOR;
  // one person by BIC: merging them costs no more than the penalty
  const bicSame = (a: GaussianStats, b: GaussianStats) => {
    const m = sumStats(a, b);
    const glr = 0.5 * (m.n * logDetCovariance(m, dims) - a.n * logDetCovariance(a, dims) - b.n * logDetCovariance(b, dims));
    return glr / m.n - Math.max(floor, penalty / m.n) <= 0;
  };
  const close = (s: OnlineSpeaker) => bestDistance <= (bounds.sameSpeakerDistance ?? SAME_SPEAKER_DISTANCE) + (bounds.shortRunSlack ?? SHORT_RUN_SLACK) * (100 / n + 100 / s.stats.n);
  const joins = best && (close(best) || bicSame(best.stats, item) || live.length >= max);
  const speakers = joins
    ? state.speakers.map((s) => (s === best ? { id: s.id, stats: sumStats(s.stats, item) } : s))
    : [...state.speakers, { id: state.speakers.length, stats: item }];
  const speaker = joins ? best!.id : state.speakers.length;
  return foldClose({ speakers, mergedInto: state.mergedInto, frames, within }, speaker, bicSame);
}

/** The pooled within-run scatter with one more run's. */
function pooled(within: OnlineDiarization["within"], run: GaussianStats, dims: number): { df: number; scatter: Float64Array } {
  const scatter = within ? Float64Array.from(within.scatter) : new Float64Array(dims * dims);
  for (let a = 0; a < dims; a++) {
    const ma = run.sum[a]! / run.n;
    for (let b = a; b < dims; b++) {
      const v = run.outer[a * dims + b]! - run.n * ma * (run.sum[b]! / run.n);
      scatter[a * dims + b] = scatter[a * dims + b]! + v;
      if (b !== a) scatter[b * dims + a] = scatter[b * dims + a]! + v;
    }
  }
  return { df: (within?.df ?? 0) + run.n - 1, scatter };
}

/** The inverse of the within-run covariance (a small ridge, a thousandth of the mean variance, keeps it regular). */
function withinPrecision(within: { df: number; scatter: Float64Array }, dims: number): Float64Array {
  const c = within.scatter.map((v) => v / Math.max(1, within.df));
  let trace = 0;
  for (let d = 0; d < dims; d++) trace += c[d * dims + d]!;
  for (let d = 0; d < dims; d++) c[d * dims + d] = c[d * dims + d]! + (1e-3 * trace) / dims;
  return inverse(c, dims);
}

/** How far apart two Gaussians' means lie in the within-run covariance's units: (Δμ)ᵀ W⁻¹ (Δμ) per dimension. */
function distance(p: GaussianStats, q: GaussianStats, precision: Float64Array, dims: number): number {
  const delta = Array.from({ length: dims }, (_, d) => p.sum[d]! / p.n - q.sum[d]! / q.n);
  let total = 0;
  for (let a = 0; a < dims; a++) for (let b = 0; b < dims; b++) total += delta[a]! * precision[a * dims + b]! * delta[b]!;
  return total / dims;
}

/** Gauss-Jordan inverse of a symmetric positive definite dims × dims matrix (19 × 19 with a ridge: no pivoting needed, and no linear-algebra dependency for one small inverse per run). */
function inverse(m: Float64Array, dims: number): Float64Array {
  const a = Float64Array.from(m);
  const out = new Float64Array(dims * dims);
  for (let i = 0; i < dims; i++) out[i * dims + i] = 1;
  for (let c = 0; c < dims; c++) {
    const pivot = a[c * dims + c]!;
    for (let k = 0; k < dims; k++) {
      a[c * dims + k] = a[c * dims + k]! / pivot;
      out[c * dims + k] = out[c * dims + k]! / pivot;
    }
    for (let r = 0; r < dims; r++) {
      const f = a[r * dims + c]!;
      if (r === c || f === 0) continue;
      for (let k = 0; k < dims; k++) {
        a[r * dims + k] = a[r * dims + k]! - f * a[c * dims + k]!;
        out[r * dims + k] = out[r * dims + k]! - f * out[c * dims + k]!;
      }
    }
  }
  return out;
}

/** The speaker that took the item, if now close enough to another to be one person, is folded into the earlier label: the item and every later one carry that. */
function foldClose(state: OnlineDiarization, speaker: number, same: (a: GaussianStats, b: GaussianStats) => boolean): { state: OnlineDiarization; speaker: number; folded?: SpeakerFold } {
  const grown = state.speakers.find((s) => s.id === speaker)!;
  const other = state.speakers.find((o) => o.id !== speaker && state.mergedInto[o.id] === undefined && o.stats.n >= MIN_ITEM_FRAMES && same(grown.stats, o.stats));
  if (!other) return { state, speaker };
  const [keep, fold] = other.id < speaker ? [other, grown] : [grown, other];
  const speakers = state.speakers.map((s) => (s.id === keep.id ? { id: s.id, stats: sumStats(keep.stats, fold.stats) } : s));
  return { state: { ...state, speakers, mergedInto: { ...state.mergedInto, [fold.id]: keep.id } }, speaker: keep.id, folded: { from: fold.id, into: keep.id } };
}

/** `speaker_<n>`, the label a realtime item carries. */
export const speakerLabel = (id: number) => `speaker_${id}`;

