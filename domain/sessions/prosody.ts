import { semitones, type PitchFrame } from "../../shared/audio/pitch";

/**
 * Prosody of the last voiced audio before a pause, as evidence for semantic end of turn
 * (docs/realtime-reference.md, "Semantic end of turn"). At the end of a turn the pitch tends to
 * fall to the speaker's low baseline; at a pause that continues (a comma, a clause) it
 * tends to stay up or rise (Ferrer, Shriberg & Stolcke 2002; Gravano & Hirschberg 2011).
 *
 * Measured on the labelled speech here (bench/end-of-turn-prosody.ts): of the features
 * below only the final pitch against the speaker's median (`levelSt`) separates; the
 * energy slope falls before every pause alike, and the slope and the fall within the
 * last 400 ms are noisy. The median needs more than the last 400 ms: over 400 ms alone
 * the final pitch sits near it everywhere; over the last REFERENCE_MS it reads as over
 * the whole utterance.
 */
export interface PauseProsody {
  /** Pitched frames in the last WINDOW_MS before the pause. */
  voicedFrames: number;
  /** F0 of the last pitched frames (median of the last three), Hz; null without any. */
  finalHz: number | null;
  /** The final F0 in semitones against the median F0 of all frames given (the speaker so far). */
  levelSt: number | null;
  /** Share of all pitched frames given at or under the final F0 (0: the lowest). */
  percentile: number | null;
  /** Least-squares slope of the pitch over the last SLOPE_MS of pitched frames, semitones per second. */
  slopeStPerS: number | null;
  /** Final F0 against the highest pitch in the last WINDOW_MS, semitones (≤ 0). */
  fallSt: number | null;
  /** Least-squares slope of the level over the last ENERGY_MS, dB per second. */
  energySlopeDbPerS: number | null;
}

/** The audio before a pause the VAD tracks: the last WINDOW_MS for the final pitch, the rest for the speaker's median. */
export const REFERENCE_MS = 1500;
const WINDOW_MS = 400;
const SLOPE_MS = 250;
const ENERGY_MS = 200;
const FINAL_FRAMES = 3;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};

/** Least-squares slope of y over x; null under three points. */
function slope(points: [number, number][]): number | null {
  if (points.length < 3) return null;
  const mx = points.reduce((s, p) => s + p[0], 0) / points.length;
  const my = points.reduce((s, p) => s + p[1], 0) / points.length;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) * (x - mx);
  }
  return den > 0 ? num / den : null;
}

/**
 * The features of the pause beginning at sample `pauseAt` (16 kHz), from the pitch frames
 * before it (`frames`, in order; those before the last WINDOW_MS only feed the speaker's
 * reference, the median and percentile).
 */
export function pauseProsody(frames: PitchFrame[], pauseAt: number): PauseProsody {
  const sec = (f: PitchFrame) => (f.atSample - pauseAt) / 16000;
  const recent = frames.filter((f) => f.atSample < pauseAt && f.atSample >= pauseAt - WINDOW_MS * 16);
  const pitched = recent.filter((f) => f.f0 !== null);
  const all = frames.flatMap((f) => (f.f0 === null ? [] : [f.f0]));
  const energy = slope(recent.filter((f) => f.atSample >= pauseAt - ENERGY_MS * 16).map((f) => [sec(f), f.db]));
  if (pitched.length === 0) return { voicedFrames: 0, finalHz: null, levelSt: null, percentile: null, slopeStPerS: null, fallSt: null, energySlopeDbPerS: energy };
  const finalHz = median(pitched.slice(-FINAL_FRAMES).map((f) => f.f0!));
  const ref = median(all);
  const lastAt = pitched.at(-1)!.atSample;
  const slopeFrames = pitched.filter((f) => f.atSample >= lastAt - SLOPE_MS * 16);
  return {
    voicedFrames: pitched.length,
    finalHz,
    levelSt: semitones(finalHz, ref),
    percentile: all.filter((f) => f <= finalHz).length / all.length,
    slopeStPerS: slope(slopeFrames.map((f) => [sec(f), semitones(f.f0!, ref)])),
    fallSt: semitones(finalHz, Math.max(...pitched.map((f) => f.f0!))),
    energySlopeDbPerS: energy,
  };
}

/**
 * What the pitch says: `falling` when the final pitch is at least FALL_ST under the
 * speaker's median (a turn-final low), `continuing` when it is at least RISE_ST over it,
 * `none` in between or with fewer than MIN_VOICED pitched frames (nothing voiced to read:
 * noise, a fricative, a whisper).
 *
 * FALL_ST: the nine utterances spoken alone in PocketSphinx's test data (the five
 * `cards`, goforward, numbers, something, tidigits: none of them in the end-of-turn bench)
 * all end 2.2–4.9 semitones under their median; 2 semitones is under the mildest of them
 * and above the jitter of a level ending (±1). RISE_ST is the same distance upwards, not
 * fitted (that data has no pauses inside a sentence).
 */
export type ProsodyVerdict = "falling" | "continuing" | "none";

const FALL_ST = -2;
const RISE_ST = 2;
const MIN_VOICED = 3;

export function judgeProsody(p: PauseProsody): ProsodyVerdict {
  if (p.voicedFrames < MIN_VOICED || p.levelSt === null) return "none";
  if (p.levelSt <= FALL_ST) return "falling";
  if (p.levelSt >= RISE_ST) return "continuing";
  return "none";
}
