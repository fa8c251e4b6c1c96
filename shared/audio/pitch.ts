/**
 * A small pitch (F0) tracker for 16 kHz mono PCM16: YIN (de Cheveigné & Kawahara 2002)
 * on audio halved to 8 kHz, 60–400 Hz, one estimate per 10 ms. It serves semantic end of
 * turn (docs/realtime-reference.md, "Semantic end of turn"): how the pitch moves over the last few
 * hundred milliseconds of voiced audio before a pause. It is run once when a pause
 * begins, on at most a few hundred milliseconds, so it is written for clarity before
 * speed (about 25,000 multiply-adds per 10 ms frame).
 *
 * A frame is unvoiced (f0 null) when it is quiet (under -50 dBFS) or when YIN's
 * normalised difference never dips under its threshold (no clear period: noise,
 * fricatives, silence).
 */
export interface PitchFrame {
  /** Centre of the analysis window, in samples (16 kHz) from the start of the input. */
  atSample: number;
  /** Fundamental frequency in Hz, or null when the frame is unvoiced. */
  f0: number | null;
  /** Level of the frame in dB relative to full scale. */
  db: number;
}

const IN_RATE = 16000;
const RATE = 8000;
const MIN_HZ = 60;
const MAX_HZ = 400;
/** Hop: 10 ms. */
const HOP = RATE / 100;
/** Integration window: 25 ms (more than one period at 60 Hz, 16.7 ms). */
const WINDOW = 200;
const MIN_LAG = Math.floor(RATE / MAX_HZ);
const MAX_LAG = Math.ceil(RATE / MIN_HZ);
/** YIN's absolute threshold on the cumulative-mean-normalised difference. */
const THRESHOLD = 0.2;
const QUIET_DB = -50;

/** Halves 16 kHz to 8 kHz: each output sample the mean of a (1,2,1)/4-smoothed pair, enough low-pass for a 60–400 Hz search. */
function decimate(pcm: Int16Array): Float32Array {
  const out = new Float32Array(Math.floor(pcm.length / 2));
  for (let i = 0; i < out.length; i++) {
    const a = pcm[2 * i - 1] ?? pcm[0]!;
    out[i] = (a + 2 * pcm[2 * i]! + pcm[2 * i + 1]!) / 4 / 32768;
  }
  return out;
}

export function trackPitch(pcm: Int16Array): PitchFrame[] {
  const x = decimate(pcm);
  const frames: PitchFrame[] = [];
  const d = new Float32Array(MAX_LAG + 1);
  for (let start = 0; start + WINDOW + MAX_LAG <= x.length; start += HOP) {
    let energy = 0;
    for (let j = 0; j < WINDOW; j++) energy += x[start + j]! * x[start + j]!;
    const db = 10 * Math.log10(energy / WINDOW + 1e-12);
    const atSample = ((start + WINDOW / 2) * IN_RATE) / RATE;
    if (db < QUIET_DB) {
      frames.push({ atSample, f0: null, db });
      continue;
    }
    // difference function and its cumulative-mean normalisation
    let running = 0;
    d[0] = 1;
    let lag = -1;
    for (let tau = 1; tau <= MAX_LAG; tau++) {
      let s = 0;
      for (let j = 0; j < WINDOW; j++) {
        const diff = x[start + j]! - x[start + j + tau]!;
        s += diff * diff;
      }
      running += s;
      d[tau] = running > 0 ? (s * tau) / running : 1;
    }
    for (let tau = MIN_LAG; tau <= MAX_LAG; tau++) {
      if (d[tau]! < THRESHOLD) {
        while (tau + 1 <= MAX_LAG && d[tau + 1]! < d[tau]!) tau++;
        lag = tau;
        break;
      }
    }
    frames.push({ atSample, f0: lag < 0 ? null : RATE / refine(d, lag), db });
  }
  return frames;
}

/** Parabolic interpolation of the dip around `lag`. */
function refine(d: Float32Array, lag: number): number {
  if (lag <= 1 || lag >= d.length - 1) return lag;
  const a = d[lag - 1]!;
  const b = d[lag]!;
  const c = d[lag + 1]!;
  const den = a - 2 * b + c;
  return den > 0 ? lag + (a - c) / (2 * den) : lag;
}

/** Semitones of `hz` above `ref` Hz. */
export function semitones(hz: number, ref: number): number {
  return 12 * Math.log2(hz / ref);
}
