import { jobDefaults } from "../../schemas/jobs";

/**
 * Silence-aware slicing of a job's audio into chunks of about `segmentSeconds`.
 *
 * How a boundary is chosen:
 * 0. The segment length used is S = max(segment_seconds, D / MAX_CHUNKS) for duration D
 *    (`effectiveSegmentSeconds`): a job never has more than MAX_CHUNKS (100) slices, so
 *    a tiny `segment_seconds` on a long file cannot flood the pipeline with events.
 * 1. The job gets n = ceil((D - 0.5 s) / S) chunks (a tail shorter than half a second
 *    joins the previous chunk), so the count is predictable: 60 s at S = 10 gives 6.
 * 2. The k-th boundary is searched for in a window of ±W around k·S, with
 *    W = min(2 s, S / 4). Targets are absolute (k·S), so shifts never accumulate.
 * 3. Inside the window the audio is cut in 20 ms frames; the cut goes to the middle of
 *    the quietest 200 ms stretch (lowest mean energy), ties going to the stretch
 *    nearest the target. A pause between words is far quieter than any word, so the
 *    cut lands in a pause whenever the window holds one; in continuous speech it lands
 *    at the softest point, which is still better than a blind cut.
 *
 * Everything here is pure: the slicer service reads only the small windows around each
 * target from object storage and hands them in, so even hours of audio never have to
 * be in memory at once. Chunk times are absolute sample offsets in the whole audio.
 */
export interface SlicePlan {
  index: number;
  /** First sample (inclusive), absolute. */
  startSample: number;
  /** Last sample (exclusive), absolute. */
  endSample: number;
}

export interface BoundaryWindow {
  /** The blind boundary k·S, in samples. */
  targetSample: number;
  /** Window to search, clamped to the audio. */
  startSample: number;
  endSample: number;
}

const FRAME_SECONDS = 0.02;
const QUIET_STRETCH_SECONDS = 0.2;
const TAIL_MERGE_SECONDS = 0.5;

/** The most slices one job is cut into (schemas/jobs.ts `jobDefaults.maxChunks`). */
export const MAX_CHUNKS: number = jobDefaults.maxChunks;

/**
 * The slice length actually used: the requested one, raised so that the audio makes at
 * most MAX_CHUNKS slices. 30 min at `segment_seconds: 1` is cut every 18 s.
 */
export function effectiveSegmentSeconds(durationSeconds: number, segmentSeconds: number): number {
  return Math.max(segmentSeconds, durationSeconds / MAX_CHUNKS);
}

function searchWindowSeconds(segmentSeconds: number): number {
  return Math.min(2, segmentSeconds / 4);
}

/** How many chunks the audio makes at the requested `segmentSeconds` (capped, see above). */
export function chunkCount(totalSamples: number, sampleRate: number, segmentSeconds: number): number {
  const duration = totalSamples / sampleRate;
  return Math.max(1, Math.ceil((duration - TAIL_MERGE_SECONDS) / effectiveSegmentSeconds(duration, segmentSeconds)));
}

/** The windows the slicer must read to place each interior boundary (requested `segmentSeconds`; capped here). */
export function boundaryWindows(totalSamples: number, sampleRate: number, requestedSegmentSeconds: number): BoundaryWindow[] {
  const n = chunkCount(totalSamples, sampleRate, requestedSegmentSeconds);
  const segmentSeconds = effectiveSegmentSeconds(totalSamples / sampleRate, requestedSegmentSeconds);
  const half = Math.round(searchWindowSeconds(segmentSeconds) * sampleRate);
  const windows: BoundaryWindow[] = [];
  for (let k = 1; k < n; k++) {
    const targetSample = Math.round(k * segmentSeconds * sampleRate);
    windows.push({
      targetSample,
      startSample: Math.max(0, targetSample - half),
      endSample: Math.min(totalSamples, targetSample + half),
    });
  }
  return windows;
}

/**
 * The quietest point of `pcm` (the samples of `window`), as an absolute sample offset.
 * Frames are 20 ms; the score of a point is the mean energy of the 200 ms around it.
 */
export function quietestPoint(pcm: Int16Array, window: BoundaryWindow, sampleRate: number): number {
  const frame = Math.max(1, Math.round(FRAME_SECONDS * sampleRate));
  const frames = Math.floor(pcm.length / frame);
  if (frames === 0) return window.targetSample;
  const energy = new Float64Array(frames);
  for (let f = 0; f < frames; f++) {
    let sum = 0;
    for (let i = f * frame; i < (f + 1) * frame; i++) sum += pcm[i]! * pcm[i]!;
    energy[f] = sum / frame;
  }
  const stretch = Math.min(frames, Math.max(1, Math.round(QUIET_STRETCH_SECONDS / FRAME_SECONDS)));
  let best = -1;
  let bestScore = Infinity;
  let bestDistance = Infinity;
  let running = 0;
  for (let f = 0; f < frames; f++) {
    running += energy[f]!;
    if (f >= stretch) running -= energy[f - stretch]!;
    if (f < stretch - 1) continue;
    const first = f - stretch + 1;
    const centre = window.startSample + Math.round(((first + f + 1) / 2) * frame);
    const score = running / stretch;
    const distance = Math.abs(centre - window.targetSample);
    // Compare with a small relative tolerance so float noise does not beat distance.
    if (score < bestScore * (1 - 1e-9) || (score <= bestScore * (1 + 1e-9) && distance < bestDistance)) {
      best = centre;
      bestScore = score;
      bestDistance = distance;
    }
  }
  return best < 0 ? window.targetSample : best;
}

/** Turns chosen cut points into contiguous chunks covering [0, totalSamples). */
export function slicesFromCuts(totalSamples: number, cuts: number[]): SlicePlan[] {
  const points = [0, ...cuts.filter((c) => c > 0 && c < totalSamples).sort((a, b) => a - b), totalSamples];
  const slices: SlicePlan[] = [];
  for (let i = 0; i + 1 < points.length; i++) {
    if (points[i + 1]! > points[i]!) slices.push({ index: slices.length, startSample: points[i]!, endSample: points[i + 1]! });
  }
  if (slices.length === 0) slices.push({ index: 0, startSample: 0, endSample: totalSamples });
  return slices;
}

/** Plans the chunks of audio held in memory (tests, small files). */
export function planSlices(pcm: Int16Array, sampleRate: number, segmentSeconds: number): SlicePlan[] {
  const cuts = boundaryWindows(pcm.length, sampleRate, segmentSeconds).map((w) =>
    quietestPoint(pcm.subarray(w.startSample, w.endSample), w, sampleRate),
  );
  return slicesFromCuts(pcm.length, cuts);
}
