import { z } from "zod";
import { logDetCovariance, statsOf, sumStats, type GaussianStats } from "./cluster";
import { speakerSegments } from "./diarize";
import { FEATURE_SAMPLE_RATE, FRAME_HOP_SAMPLES, frameFeatures, type FrameFeatures } from "./features";

const FRAME_SECONDS = FRAME_HOP_SAMPLES / FEATURE_SAMPLE_RATE;

/**
 * Speaker labels while a realtime session is still talking: the embedded diarizer's
 * features and distance (diarize.ts, cluster.ts), one committed item at a time. Each
 * known speaker is a full-covariance Gaussian's sufficient statistics (constant memory:
 * 19 sums and 361 sums of products, whatever the session's length); an item's voiced
 * frames either join the speaker whose Gaussian they fit with the least ΔBIC (when
 * merging them costs no more than the BIC penalty, as the offline clustering decides),
 * or start a new speaker, up to `maxSpeakers`. Labels already given never change: when
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
  /** Voiced frames heard so far (the BIC penalty's sample size). */
  frames: number;
}

export interface OnlineBounds {
  /** Never more speakers than this (default 10, the documented bound). */
  maxSpeakers?: number;
  /** Exactly this many are expected: new speakers are started until there are this many, never more. */
  speakers?: number;
  /** The BIC penalty's weight and its per-frame floor (default the offline diarizer's; bench/diarization.ts tries others). */
  bicPenalty?: number;
  glrFloor?: number;
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
/** An item with less speech than this (1 s) is placed with the speaker it fits best and does not change the speakers: too few frames for a full covariance. */
const MIN_ITEM_FRAMES = 100;
const DEFAULT_MAX_SPEAKERS = 10;

export const emptyDiarization = (): OnlineDiarization => ({ speakers: [], mergedInto: {}, frames: 0 });

/** The state as plain JSON (a takeover's copy of it: services/vad/session-state.ts). */
export function savedDiarization(state: OnlineDiarization): unknown {
  return { ...state, speakers: state.speakers.map((s) => ({ id: s.id, n: s.stats.n, sum: [...s.stats.sum], outer: [...s.stats.outer] })) };
}

const savedShape = z.object({
  speakers: z
    .array(z.object({ id: z.number().int().nonnegative(), n: z.number().nonnegative(), sum: z.array(z.number()), outer: z.array(z.number()) }))
    .refine((ss) => ss.every((sp) => sp.outer.length === sp.sum.length ** 2), "outer holds dims × dims sums"),
  mergedInto: z.record(z.string(), z.number().int().nonnegative()),
  frames: z.number().nonnegative(),
});

/** The state back from `savedDiarization`'s JSON, or null when it is not one. */
export function restoredDiarization(json: unknown): OnlineDiarization | null {
  const parsed = savedShape.safeParse(json);
  if (!parsed.success) return null;
  const speakers = parsed.data.speakers.map((s) => ({ id: s.id, stats: { n: s.n, sum: Float64Array.from(s.sum), outer: Float64Array.from(s.outer) } }));
  return { speakers, mergedInto: Object.fromEntries(Object.entries(parsed.data.mergedInto).map(([k, v]) => [Number(k), v])), frames: parsed.data.frames };
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

/** The speaker of the next item, from its voiced frames (`dims` values each), and the state after it. */
function labelItem(state: OnlineDiarization, z: Float32Array, dims: number, bounds: OnlineBounds = {}): { state: OnlineDiarization; speaker: number | null; folded?: SpeakerFold } {
  const n = Math.floor(z.length / dims);
  if (n === 0) return { state, speaker: null };
  const item = statsOf(z, dims, 0, n);
  const max = Math.min(bounds.speakers ?? Infinity, bounds.maxSpeakers ?? DEFAULT_MAX_SPEAKERS);
  const live = state.speakers.filter((s) => state.mergedInto[s.id] === undefined);
  const frames = state.frames + n;
  const penalty = 0.5 * (dims + (dims * (dims + 1)) / 2) * Math.log(Math.max(2, frames)) * (bounds.bicPenalty ?? BIC_PENALTY);
  const floor = bounds.glrFloor ?? GLR_FLOOR;
  const cost = (a: GaussianStats, b: GaussianStats) => {
    const m = sumStats(a, b);
    const glr = 0.5 * (m.n * logDetCovariance(m, dims) - a.n * logDetCovariance(a, dims) - b.n * logDetCovariance(b, dims));
    return glr / m.n - Math.max(floor, penalty / m.n);
  };
  // the speaker the item fits best: the likelihood the item loses joining each, per item
  // frame, the same yardstick for every candidate (ΔBIC per merged frame, used before,
  // favoured the speakers heard longest: 3–4 speaker DER 17–19% → 12–20%, bench/diarization.ts)
  let best: OnlineSpeaker | undefined;
  let bestFit = Infinity;
  for (const s of live) {
    const fit = placement(s.stats, item, dims);
    if (fit < bestFit) [best, bestFit] = [s, fit];
  }
  if (n < MIN_ITEM_FRAMES) {
    // too short to judge or to learn from: the best fit, or the first speaker
    if (best) return { state: { ...state, frames }, speaker: best.id };
    const first = { id: state.speakers.length, stats: item };
    return { state: { ...state, speakers: [...state.speakers, first], frames }, speaker: first.id };
  }
  // … and whether it is that speaker: merging them costs no more than the BIC penalty
  const joins = best && (cost(best.stats, item) <= 0 || live.length >= max);
  const speakers = joins
    ? state.speakers.map((s) => (s === best ? { id: s.id, stats: sumStats(s.stats, item) } : s))
    : [...state.speakers, { id: state.speakers.length, stats: item }];
  const speaker = joins ? best!.id : state.speakers.length;
  return foldClose({ speakers, mergedInto: state.mergedInto, frames }, speaker, cost);
}

/** The offline diarizer's placement of a short segment: the likelihood it loses joining the speaker (per frame). */
function placement(model: GaussianStats, item: GaussianStats, dims: number): number {
  return ((model.n + item.n) * logDetCovariance(sumStats(model, item), dims) - model.n * logDetCovariance(model, dims)) / item.n;
}

/** The speaker that took the item, if now close enough to another to be one person, is folded into the earlier label: the item and every later one carry that. */
function foldClose(state: OnlineDiarization, speaker: number, cost: (a: GaussianStats, b: GaussianStats) => number): { state: OnlineDiarization; speaker: number; folded?: SpeakerFold } {
  const grown = state.speakers.find((s) => s.id === speaker)!;
  const other = state.speakers.find((o) => o.id !== speaker && state.mergedInto[o.id] === undefined && o.stats.n >= MIN_ITEM_FRAMES && cost(grown.stats, o.stats) <= 0);
  if (!other) return { state, speaker };
  const [keep, fold] = other.id < speaker ? [other, grown] : [grown, other];
  const speakers = state.speakers.map((s) => (s.id === keep.id ? { id: s.id, stats: sumStats(keep.stats, fold.stats) } : s));
  return { state: { ...state, speakers, mergedInto: { ...state.mergedInto, [fold.id]: keep.id } }, speaker: keep.id, folded: { from: fold.id, into: keep.id } };
}

/** `speaker_<n>`, the label a realtime item carries. */
export const speakerLabel = (id: number) => `speaker_${id}`;

