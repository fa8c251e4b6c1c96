/**
 * Per-frame acoustic features for the embedded diarizer: mel-frequency cepstra of 16 kHz
 * mono PCM16, 25 ms Hamming frames every 10 ms, 512-point FFT, 40 mel bands from 60 Hz
 * to 7.6 kHz, log, DCT-II; cepstra 1..19 are kept (c0 is loudness, which says more about
 * the microphone distance than the speaker).
 *
 * Written here rather than taken from npm: the libraries that compute MFCCs (meyda,
 * essentia.js) bring a browser-oriented runtime or a WASM build of 2–3 MB for what is a
 * 512-point FFT and a matrix product, and none exposes the 10 ms frame loop over a whole
 * Int16Array without copying each frame into its own object. This costs about 1.2 ms of
 * CPU per audio second (bench/diarization.ts).
 */
export const FEATURE_SAMPLE_RATE = 16_000;
export const FRAME_HOP_SAMPLES = 160; // 10 ms
const FRAME_SAMPLES = 400; // 25 ms
const FFT_SIZE = 512;
const MEL_BANDS = 40;
const CEPSTRA = 19;

/** Frames × CEPSTRA values, row-major. */
export interface FrameFeatures {
  readonly frames: number;
  readonly dims: number;
  readonly values: Float32Array;
}

interface Tables {
  window: Float64Array;
  cos: Float64Array;
  sin: Float64Array;
  bitrev: Uint16Array;
  /** Per band: first bin and weights. */
  mel: { from: number; weights: Float64Array }[];
  dct: Float64Array;
}

let tables: Tables | undefined;

function buildTables(): Tables {
  const window = new Float64Array(FRAME_SAMPLES);
  for (let i = 0; i < FRAME_SAMPLES; i++) window[i] = 0.54 - 0.46 * Math.cos((2 * Math.PI * i) / (FRAME_SAMPLES - 1));
  const cos = new Float64Array(FFT_SIZE / 2);
  const sin = new Float64Array(FFT_SIZE / 2);
  for (let i = 0; i < FFT_SIZE / 2; i++) {
    cos[i] = Math.cos((2 * Math.PI * i) / FFT_SIZE);
    sin[i] = -Math.sin((2 * Math.PI * i) / FFT_SIZE);
  }
  const bits = Math.log2(FFT_SIZE);
  const bitrev = new Uint16Array(FFT_SIZE);
  for (let i = 0; i < FFT_SIZE; i++) {
    let r = 0;
    for (let b = 0; b < bits; b++) r |= ((i >> b) & 1) << (bits - 1 - b);
    bitrev[i] = r;
  }
  const toMel = (f: number) => 2595 * Math.log10(1 + f / 700);
  const fromMel = (m: number) => 700 * (10 ** (m / 2595) - 1);
  const lo = toMel(60);
  const hi = toMel(7600);
  const edges = Array.from({ length: MEL_BANDS + 2 }, (_, i) => (fromMel(lo + ((hi - lo) * i) / (MEL_BANDS + 1)) * FFT_SIZE) / FEATURE_SAMPLE_RATE);
  const mel = [];
  for (let b = 0; b < MEL_BANDS; b++) {
    const [l, c, r] = [edges[b]!, edges[b + 1]!, edges[b + 2]!];
    const from = Math.ceil(l);
    const to = Math.floor(r);
    const weights = new Float64Array(Math.max(1, to - from + 1));
    for (let k = from; k <= to; k++) weights[k - from] = k <= c ? (k - l) / (c - l) : (r - k) / (r - c);
    mel.push({ from, weights });
  }
  const dct = new Float64Array(CEPSTRA * MEL_BANDS);
  for (let q = 0; q < CEPSTRA; q++) {
    for (let b = 0; b < MEL_BANDS; b++) dct[q * MEL_BANDS + b] = Math.cos((Math.PI * (q + 1) * (b + 0.5)) / MEL_BANDS);
  }
  return { window, cos, sin, bitrev, mel, dct };
}

/** In-place radix-2 FFT of (re, im), length FFT_SIZE. */
function fft(re: Float64Array, im: Float64Array, t: Tables): void {
  for (let i = 0; i < FFT_SIZE; i++) {
    const j = t.bitrev[i]!;
    if (j > i) {
      const a = re[i]!;
      re[i] = re[j]!;
      re[j] = a;
    }
  }
  for (let size = 2; size <= FFT_SIZE; size <<= 1) {
    const half = size >> 1;
    const step = FFT_SIZE / size;
    for (let start = 0; start < FFT_SIZE; start += size) {
      for (let k = 0; k < half; k++) {
        const wr = t.cos[k * step]!;
        const wi = t.sin[k * step]!;
        const a = start + k;
        const b = a + half;
        const xr = re[b]! * wr - im[b]! * wi;
        const xi = re[b]! * wi + im[b]! * wr;
        re[b] = re[a]! - xr;
        im[b] = im[a]! - xi;
        re[a] = re[a]! + xr;
        im[a] = im[a]! + xi;
      }
    }
  }
}

/** MFCCs of every 10 ms frame of `pcm` (16 kHz mono PCM16). Pure. */
export function frameFeatures(pcm: Int16Array): FrameFeatures {
  const t = (tables ??= buildTables());
  const frames = pcm.length < FRAME_SAMPLES ? 0 : Math.floor((pcm.length - FRAME_SAMPLES) / FRAME_HOP_SAMPLES) + 1;
  const values = new Float32Array(frames * CEPSTRA);
  const re = new Float64Array(FFT_SIZE);
  const im = new Float64Array(FFT_SIZE);
  const power = new Float64Array(FFT_SIZE / 2 + 1);
  const logMel = new Float64Array(MEL_BANDS);
  for (let f = 0; f < frames; f++) {
    const at = f * FRAME_HOP_SAMPLES;
    let mean = 0;
    for (let i = 0; i < FRAME_SAMPLES; i++) mean += pcm[at + i]!;
    mean /= FRAME_SAMPLES;
    let prev = pcm[at]! - mean;
    for (let i = 0; i < FRAME_SAMPLES; i++) {
      const x = pcm[at + i]! - mean;
      // pre-emphasis 0.97, then the window
      re[i] = (x - 0.97 * prev) * t.window[i]!;
      prev = x;
    }
    re.fill(0, FRAME_SAMPLES);
    im.fill(0);
    fft(re, im, t);
    for (let k = 0; k <= FFT_SIZE / 2; k++) power[k] = re[k]! * re[k]! + im[k]! * im[k]!;
    for (let b = 0; b < MEL_BANDS; b++) {
      const { from, weights } = t.mel[b]!;
      let s = 0;
      for (let k = 0; k < weights.length; k++) s += power[from + k]! * weights[k]!;
      logMel[b] = Math.log(s + 1e-3);
    }
    for (let q = 0; q < CEPSTRA; q++) {
      let s = 0;
      for (let b = 0; b < MEL_BANDS; b++) s += t.dct[q * MEL_BANDS + b]! * logMel[b]!;
      values[f * CEPSTRA + q] = s;
    }
  }
  return { frames, dims: CEPSTRA, values };
}
