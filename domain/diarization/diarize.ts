import { clusterBic, logDetCovariance, statsOf, sumStats, type GaussianStats } from "./cluster";
import { FRAME_HOP_SAMPLES, FEATURE_SAMPLE_RATE, frameFeatures, type FrameFeatures } from "./features";

/**
 * The embedded diarizer (docs/diarization.md): who spoke when, from the audio alone, with
 * no model to download. Pure: the speech regions come from the caller's voice activity
 * detector (the project's WebRTC VAD, shared/audio/diarize-audio.ts).
 *
 * 1. MFCCs every 10 ms (features.ts), standardized over the clip's speech frames.
 * 2. Speaker-change detection: every 0.1 s of speech, the symmetric KL divergence of the
 *    diagonal Gaussians of the 1 s of speech before and after; local peaks above
 *    `changeThreshold` cut the speech into segments, and so does every pause of
 *    `pauseCutSeconds`. It over-cuts on purpose: clustering joins what belongs together,
 *    while a segment spanning two speakers can only be wrong for one of them.
 * 3. Segments with at least `minClusterSeconds` of speech are clustered bottom-up by BIC
 *    with full-covariance Gaussians (cluster.ts): to the `speakers` asked, within
 *    `min_speakers`..`max_speakers`, else until no merge lowers the BIC (the count is
 *    estimated; `bicPenalty` is its one knob, tuned on bench/diarization.ts).
 * 4. Short segments join the cluster they fit best; runs of one speaker become turns.
 */
export interface SpeakerTurn {
  /** Seconds from the start of the clip. */
  start: number;
  end: number;
  /** 0, 1, …: in order of each speaker's first turn. */
  speaker: number;
}

export interface SpeakerCountHint {
  /** Exactly this many speakers (`speakers`). */
  speakers?: number;
  /** A range (`min_speakers`, `max_speakers`). */
  minSpeakers?: number;
  maxSpeakers?: number;
}

export interface SpeechRegion {
  start: number;
  end: number;
}

/** A clip's 16 kHz mono PCM16, read in pieces (a long job's audio is not held whole). */
export interface DiarizerAudio {
  readonly samples: number;
  read(fromSample: number, toSample: number): Promise<Int16Array>;
}

/**
 * The seam: what labels speaker turns in a clip. The embedded diarizer (embedded.ts) is
 * one; an operator-supplied model or an upstream that diarizes would be another
 * implementation of this interface, handed to the segment route (GatewayDeps.diarizer)
 * and the job chunk step (TranscribeChunkDeps.diarizer) (docs/diarization.md,
 * "Replacing the diarizer").
 */
export interface Diarizer {
  readonly name: string;
  diarize(audio: DiarizerAudio, hint: SpeakerCountHint): Promise<SpeakerTurn[]>;
}

const DIARIZE_DEFAULTS = {
  /** Speech each side of a candidate change point (frames of 10 ms). */
  changeWindowFrames: 100,
  /** Candidate change points every this many speech frames. */
  changeStepFrames: 10,
  /** Symmetric KL divergence per dimension above which a local peak is a change. */
  changeThreshold: 0.6,
  /** A pause at least this long always cuts a segment (speakers rarely take turns faster). */
  pauseCutSeconds: 0.25,
  /** Segments with less speech than this are not clustered, only placed. */
  minClusterSeconds: 1.0,
  /** The BIC penalty's weight (λ): higher merges more, so estimates fewer speakers. */
  bicPenalty: 4,
  /**
   * Per frame, a merge is always allowed this much log-likelihood loss: BIC's penalty
   * shrinks per frame as clusters grow, so without a floor a long recording's speakers
   * stay split into several clusters each (bench: 12 found for 4 in 16 minutes).
   */
  glrFloor: 0.5,
  /** A speaker needs this much speech to count when the count is estimated. */
  minSpeakerSeconds: 2.0,
  /**
   * …and this share of the clustered speech: on a long recording the clustering leaves
   * clusters of a minute or two that are one speaker's off moments, not a person (bench,
   * 24 minutes of 4 voices: 6–8 speakers found, DER 20.9%; with 8%, 4 and 8.9%; the short
   * 4-voice conversations lose a point: 10.6 → 11.5% and 15.8 → 16.9%).
   */
  minSpeakerShare: 0.08,
  /**
   * Speakers that each hold at least this much speech (a minute) are judged by their
   * long-term average cepstra too (`joinLongVoices`): over a minute a speaker's average
   * spectrum no longer depends much on what was said, while the full-covariance BIC
   * still tells one speaker's phrases apart (30-minute recordings of three of the test
   * data's voices: 12 of 35 came back with 5 or 6 speakers, each extra one a part of one
   * voice's material; docs/diarization.md).
   */
  longVoiceSeconds: 60,
  /** …and two such speakers are one voice when their means differ by less than this (squared, per dimension, in units of their variance): 0.2 joined two voices recorded alike, 0.15 two of the four of bench/diarization.ts's 24-minute recording; 0.12 left 12 of the 35 at 4. */
  longVoiceDistance: 0.12,
  /** A gap of at most this between two turns of one speaker is bridged. */
  bridgeSeconds: 0.5,
  /** Segments clustered at most (clustering is cubic in them); more are sampled evenly and the rest placed. */
  maxClusterItems: 300,
} as const;

export type DiarizeSettings = { -readonly [K in keyof typeof DIARIZE_DEFAULTS]: number };

const FRAME_SECONDS = FRAME_HOP_SAMPLES / FEATURE_SAMPLE_RATE;
/** The most speakers a clip is given when the count is estimated (the documented 1–10). */
const MAX_SPEAKERS = 10;

/** PCM (16 kHz mono) and its speech regions → speaker turns. */
export function diarizePcm(pcm: Int16Array, speech: readonly SpeechRegion[], hint: SpeakerCountHint = {}, settings: Partial<DiarizeSettings> = {}): SpeakerTurn[] {
  return diarizeFeatures(frameFeatures(pcm), speech, hint, settings);
}

export function diarizeFeatures(features: FrameFeatures, speech: readonly SpeechRegion[], hint: SpeakerCountHint = {}, overrides: Partial<DiarizeSettings> = {}): SpeakerTurn[] {
  const s: DiarizeSettings = { ...DIARIZE_DEFAULTS, ...overrides };
  const voiced = speechFrames(features.frames, speech);
  if (voiced.length === 0) return [];
  const z = standardizedFrames(features, voiced);
  const segments = cutSegments(z, features.dims, voiced, s);
  const labels = assignSpeakers(z, features.dims, segments, hint, s);
  return turnsOf(segments, labels, voiced, s);
}

/** Indices of 10 ms frames whose centre lies in a speech region. */
function speechFrames(frames: number, speech: readonly SpeechRegion[]): number[] {
  const out: number[] = [];
  for (const r of speech) {
    const from = Math.max(0, Math.ceil((r.start - 0.0125) / FRAME_SECONDS));
    const to = Math.min(frames, Math.floor((r.end - 0.0125) / FRAME_SECONDS) + 1);
    for (let f = from; f < to; f++) if (out.length === 0 || f > out[out.length - 1]!) out.push(f);
  }
  return out;
}

/** The speech frames' features, each dimension to mean 0 and variance 1 over the clip's speech. */
function standardizedFrames(features: FrameFeatures, voiced: readonly number[]): Float32Array {
  const { dims, values } = features;
  const z = new Float32Array(voiced.length * dims);
  const mean = new Float64Array(dims);
  const sq = new Float64Array(dims);
  voiced.forEach((f, i) => {
    for (let d = 0; d < dims; d++) {
      const v = values[f * dims + d]!;
      z[i * dims + d] = v;
      mean[d] = mean[d]! + v;
      sq[d] = sq[d]! + v * v;
    }
  });
  const n = voiced.length;
  for (let d = 0; d < dims; d++) {
    const m = mean[d]! / n;
    const sd = Math.sqrt(Math.max(sq[d]! / n - m * m, 1e-9));
    for (let i = 0; i < n; i++) z[i * dims + d] = (z[i * dims + d]! - m) / sd;
  }
  return z;
}

/**
 * One speaker's runs within a stretch of speech (a realtime item, online.ts): its voiced
 * frames (`z`, `dims` values each; `voiced`: their frame indices) cut at pauses and
 * speaker-change peaks as the offline diarizer cuts a clip. The symmetric KL divergence
 * of diagonal Gaussians does not change when a dimension is scaled, so raw cepstra cut
 * as the clip's standardized ones do.
 */
export function speakerSegments(z: Float32Array, dims: number, voiced: readonly number[]): Segment[] {
  return cutSegments(z, dims, voiced, DIARIZE_DEFAULTS);
}

/** A run of speech frames [from, to) (indices into the voiced list). */
export interface Segment {
  from: number;
  to: number;
}

/** Cuts at pauses and at speaker-change peaks. */
function cutSegments(z: Float32Array, dims: number, voiced: readonly number[], s: DiarizeSettings): Segment[] {
  const n = voiced.length;
  const cuts = new Set<number>([0, n]);
  const pause = Math.round(s.pauseCutSeconds / FRAME_SECONDS);
  for (let i = 1; i < n; i++) if (voiced[i]! - voiced[i - 1]! > pause) cuts.add(i);
  // the two windows' sums of x and x² per dimension, slid a block of `step` frames at a time
  const step = s.changeStepFrames;
  const r = Math.max(1, Math.round(s.changeWindowFrames / step));
  const blocks = Math.floor(n / step);
  const left = { sum: new Float64Array(dims), sq: new Float64Array(dims) };
  const right = { sum: new Float64Array(dims), sq: new Float64Array(dims) };
  const add = (block: number, into: typeof left, sign: 1 | -1) => {
    for (let i = block * step; i < (block + 1) * step; i++) {
      for (let d = 0; d < dims; d++) {
        const v = z[i * dims + d]!;
        into.sum[d] = into.sum[d]! + sign * v;
        into.sq[d] = into.sq[d]! + sign * v * v;
      }
    }
  };
  for (let b = 0; b < Math.min(r, blocks); b++) add(b, left, 1);
  for (let b = r; b < Math.min(2 * r, blocks); b++) add(b, right, 1);
  const scores: { at: number; score: number }[] = [];
  for (let k = r; k + r <= blocks; k++) {
    scores.push({ at: k * step, score: divergence(left, right, r * step, dims) });
    if (k + r === blocks) break;
    add(k, left, 1);
    add(k - r, left, -1);
    add(k + r, right, 1);
    add(k, right, -1);
  }
  const reach = r;
  scores.forEach((c, i) => {
    if (c.score < s.changeThreshold) return;
    for (let k = Math.max(0, i - reach); k <= Math.min(scores.length - 1, i + reach); k++) if (scores[k]!.score > c.score) return;
    cuts.add(c.at);
  });
  const ordered = [...cuts].sort((a, b) => a - b);
  const out: Segment[] = [];
  for (let i = 0; i + 1 < ordered.length; i++) if (ordered[i + 1]! > ordered[i]!) out.push({ from: ordered[i]!, to: ordered[i + 1]! });
  return out;
}

/** Symmetric KL divergence between two windows' diagonal Gaussians (sums over `n` frames each), per dimension. */
function divergence(l: { sum: Float64Array; sq: Float64Array }, r: { sum: Float64Array; sq: Float64Array }, n: number, dims: number): number {
  let total = 0;
  for (let d = 0; d < dims; d++) {
    const ml = l.sum[d]! / n;
    const mr = r.sum[d]! / n;
    const vl = Math.max(l.sq[d]! / n - ml * ml, 1e-3);
    const vr = Math.max(r.sq[d]! / n - mr * mr, 1e-3);
    const dm = (ml - mr) ** 2;
    total += 0.5 * (vl / vr + vr / vl - 2) + 0.5 * dm * (1 / vl + 1 / vr);
  }
  return total / dims;
}

/**
 * A speaker per segment: the segments with at least minClusterSeconds of speech are
 * clustered by BIC (cluster.ts); with the count estimated, a cluster with less than
 * minSpeakerSeconds of speech is not a speaker and its segments are placed again. Each
 * short segment joins the cluster whose Gaussian it fits best (the least ΔBIC). Then,
 * with the count estimated, speakers of a minute or more whose averages match are one
 * voice (`joinLongVoices`).
 */
function assignSpeakers(z: Float32Array, dims: number, segments: Segment[], hint: SpeakerCountHint, s: DiarizeSettings): number[] {
  const stats = segments.map((g) => statsOf(z, dims, g.from, g.to));
  const seconds = segments.map((g) => (g.to - g.from) * FRAME_SECONDS);
  let long = segments.map((_, i) => i).filter((i) => seconds[i]! >= s.minClusterSeconds);
  if (long.length === 0) long = [seconds.indexOf(Math.max(...seconds))];
  if (long.length > s.maxClusterItems) {
    const step = long.length / s.maxClusterItems;
    long = Array.from({ length: s.maxClusterItems }, (_, k) => long[Math.floor(k * step)]!);
  }
  const { labels } = clusterBic(
    long.map((i) => stats[i]!),
    dims,
    // never more than the documented bound (10), whatever the estimate
    { exact: hint.speakers, min: hint.minSpeakers, max: hint.maxSpeakers ?? MAX_SPEAKERS, threshold: s.bicPenalty, glrFloor: s.glrFloor },
  );
  const members = new Map<number, number[]>();
  labels.forEach((l, k) => members.set(l, [...(members.get(l) ?? []), long[k]!]));
  let clusters = [...members.values()];
  // an estimated count does not count a "speaker" with less than minSpeakerSeconds (a cough, a door)
  if (hint.speakers === undefined) {
    const speech = (m: number[]) => m.reduce((a, i) => a + seconds[i]!, 0);
    const total = clusters.reduce((a, m) => a + speech(m), 0);
    const big = clusters.filter((m) => speech(m) >= Math.max(s.minSpeakerSeconds, s.minSpeakerShare * total));
    if (big.length >= Math.max(1, hint.minSpeakers ?? 1)) clusters = big;
  }
  const out = new Array<number>(segments.length).fill(-1);
  clusters.forEach((m, c) => m.forEach((i) => (out[i] = c)));
  const models = clusters.map((m) => m.map((i) => stats[i]!).reduce(sumStats));
  const modelLogDet = models.map((m) => logDetCovariance(m, dims));
  out.forEach((c, i) => {
    if (c >= 0) return;
    let best = Infinity;
    models.forEach((m, k) => {
      const cost = (m.n + stats[i]!.n) * logDetCovariance(sumStats(m, stats[i]!), dims) - m.n * modelLogDet[k]!;
      if (cost < best) [best, out[i]] = [cost, k];
    });
  });
  if (hint.speakers !== undefined) return out;
  // judged on every segment of each speaker (a long recording clusters a sample of them)
  const speakers = clusters.map((_, c) => out.flatMap((label, i) => (label === c ? [i] : [])));
  const joined = joinLongVoices(speakers, stats, dims, Math.max(1, hint.minSpeakers ?? 1), s);
  joined.forEach((m, c) => m.forEach((i) => (out[i] = c)));
  return out;
}

/**
 * With the count estimated: the two clusters of at least `longVoiceSeconds` of speech
 * whose long-term average cepstra lie closest are joined while they differ by less than
 * `longVoiceDistance`, never below `min` clusters. Clusters of a short conversation are
 * too small to be judged so (two people's minute-long averages can lie that close).
 */
function joinLongVoices(clusters: number[][], stats: readonly GaussianStats[], dims: number, min: number, s: DiarizeSettings): number[][] {
  const minFrames = s.longVoiceSeconds / FRAME_SECONDS;
  let groups = clusters.map((m) => ({ members: m, stats: m.map((i) => stats[i]!).reduce(sumStats) }));
  while (groups.length > min) {
    let best: [number, number] | null = null;
    let bestDistance = s.longVoiceDistance;
    for (let a = 0; a < groups.length; a++) {
      for (let b = a + 1; b < groups.length; b++) {
        if (groups[a]!.stats.n < minFrames || groups[b]!.stats.n < minFrames) continue;
        const d = meanDistance(groups[a]!.stats, groups[b]!.stats, dims);
        if (d < bestDistance) [best, bestDistance] = [[a, b], d];
      }
    }
    if (!best) break;
    const [a, b] = best;
    const joined = { members: [...groups[a]!.members, ...groups[b]!.members], stats: sumStats(groups[a]!.stats, groups[b]!.stats) };
    groups = groups.flatMap((g, k) => (k === a ? [joined] : k === b ? [] : [g]));
  }
  return groups.map((g) => g.members);
}

/** How far apart two Gaussians' means lie: the squared difference per dimension over the two variances' mean, averaged over the dimensions. */
function meanDistance(p: GaussianStats, q: GaussianStats, dims: number): number {
  let total = 0;
  for (let d = 0; d < dims; d++) {
    const mp = p.sum[d]! / p.n;
    const mq = q.sum[d]! / q.n;
    const vp = p.outer[d * dims + d]! / p.n - mp * mp;
    const vq = q.outer[d * dims + d]! / q.n - mq * mq;
    total += (mp - mq) ** 2 / Math.max((vp + vq) / 2, 1e-9);
  }
  return total / dims;
}

/** Runs of one speaker, in seconds; speakers renumbered by first appearance. */
function turnsOf(segments: Segment[], labels: readonly number[], voiced: readonly number[], s: DiarizeSettings): SpeakerTurn[] {
  const raw: SpeakerTurn[] = [];
  const pause = Math.round(0.3 / FRAME_SECONDS);
  segments.forEach((g, i) => {
    // a segment spans pauses shorter than pauseCutSeconds; split it at those over 0.3 s
    let from = g.from;
    for (let k = g.from + 1; k <= g.to; k++) {
      if (k === g.to || voiced[k]! - voiced[k - 1]! > pause) {
        raw.push({ start: voiced[from]! * FRAME_SECONDS, end: (voiced[k - 1]! + 1) * FRAME_SECONDS + 0.015, speaker: labels[i]! });
        from = k;
      }
    }
  });
  const merged: SpeakerTurn[] = [];
  for (const t of raw) {
    const last = merged[merged.length - 1];
    if (last && last.speaker === t.speaker && t.start - last.end <= s.bridgeSeconds) last.end = t.end;
    else merged.push({ ...t });
  }
  const ids = new Map<number, number>();
  return merged.map((t) => {
    if (!ids.has(t.speaker)) ids.set(t.speaker, ids.size);
    return { start: round3(t.start), end: round3(t.end), speaker: ids.get(t.speaker)! };
  });
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;
