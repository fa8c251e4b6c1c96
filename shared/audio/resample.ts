/**
 * Streaming PCM16 resampler for the realtime plane: a client declares 8, 16, 24 or
 * 48 kHz (mono or interleaved stereo) and everything behind the gateway sees 16 kHz
 * mono. Stereo is averaged to mono; downsampling runs a windowed-sinc low-pass first
 * (cut-off just under the output Nyquist) so 48 kHz speech does not alias into the
 * speech band; then linear interpolation between the filtered samples. State carries
 * across chunks, so splitting a stream anywhere gives the same output as resampling it
 * whole.
 *
 * Polyphase: the low-pass and the interpolation are one kernel per output phase, applied
 * only where an output sample falls (output m sits at input position m·inRate/outRate,
 * kept as an exact fraction), so 48 → 16 kHz filters one input position in three
 * and 24 → 16 kHz two in three instead of filtering every input sample and dropping the
 * rest. Both of those rates' kernels are symmetric and folded (half the multiplications).
 */
export interface Resampler {
  readonly inRate: number;
  readonly outRate: number;
  readonly channels: number;
  /**
   * Interleaved input samples (a whole number of frames) → output samples. At the same
   * rate in mono the output is the input itself (no copy: the frame path of the
   * realtime gateway is per frame, 25,000 a second at 1,000 sessions).
   */
  push(samples: Int16Array): Int16Array;
}

const TAPS = 31;

function lowPassKernel(cutoff: number): Float64Array {
  // cutoff as a fraction of the input sample rate (0..0.5); Blackman-windowed sinc.
  const k = new Float64Array(TAPS);
  const mid = (TAPS - 1) / 2;
  let sum = 0;
  for (let i = 0; i < TAPS; i++) {
    const x = i - mid;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const w = 0.42 - 0.5 * Math.cos((2 * Math.PI * i) / (TAPS - 1)) + 0.08 * Math.cos((4 * Math.PI * i) / (TAPS - 1));
    k[i] = sinc * w;
    sum += k[i]!;
  }
  for (let i = 0; i < TAPS; i++) k[i]! /= sum;
  return k;
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

/** One output phase: the low-pass followed by linear interpolation at `frac`, as one kernel over K + 1 inputs. */
interface Phase {
  /** taps[t] weighs the input t places after the output's first input. */
  taps: Float64Array;
  /** taps[t] === taps[n - 1 - t] over the first n taps (the rest are 0): folded, half the multiplications. */
  symmetric: number;
}

function phaseKernels(kernel: Float64Array, phases: number): Phase[] {
  const k = kernel.length;
  return Array.from({ length: phases }, (_, p) => {
    const frac = p / phases;
    const taps = new Float64Array(k + 1);
    for (let t = 0; t <= k; t++) taps[t] = (1 - frac) * (t < k ? kernel[t]! : 0) + frac * (t > 0 ? kernel[t - 1]! : 0);
    const n = frac === 0 ? k : k + 1;
    let symmetric = n;
    for (let t = 0; t < n; t++) if (Math.abs(taps[t]! - taps[n - 1 - t]!) > 1e-12) symmetric = 0;
    return { taps, symmetric };
  });
}

export function createResampler(inRate: number, outRate: number, channels = 1): Resampler {
  if (!(Number.isInteger(inRate) && Number.isInteger(outRate) && inRate > 0 && outRate > 0)) throw new RangeError("sample rates must be positive integers");
  if (channels !== 1 && channels !== 2) throw new RangeError("channels must be 1 or 2");
  const identity = inRate === outRate;
  // output m at input position m·M/L: index ⌊m·M/L⌋, phase (m·M mod L)/L
  const g = gcd(inRate, outRate);
  const L = outRate / g;
  const M = inRate / g;
  // upsampling interpolates without a low-pass: a one-tap kernel
  const kernel = inRate > outRate ? lowPassKernel((0.45 * outRate) / inRate) : Float64Array.of(1);
  const K = kernel.length;
  const phases = phaseKernels(kernel, L);
  // `work` holds the last K inputs of earlier chunks, then this chunk: an output's first
  // input is work[i + 1] for input index i relative to the chunk (i ≥ -1)
  let work = new Float64Array(K);
  let index = 0; // the next output's input index, relative to the current chunk's first sample
  let phase = 0; // and its phase, 0 … L-1

  return {
    inRate,
    outRate,
    channels,
    push(samples: Int16Array): Int16Array {
      const frames = Math.floor(samples.length / channels);
      if (identity && channels === 1) return samples;
      if (identity) {
        const out = new Int16Array(frames);
        for (let i = 0; i < frames; i++) out[i] = Math.round((samples[2 * i]! + samples[2 * i + 1]!) / 2);
        return out;
      }
      if (work.length < K + frames) {
        const grown = new Float64Array(K + frames);
        grown.set(work.subarray(0, K));
        work = grown;
      }
      if (channels === 1) for (let i = 0; i < frames; i++) work[K + i] = samples[i]!;
      else for (let i = 0; i < frames; i++) work[K + i] = (samples[2 * i]! + samples[2 * i + 1]!) / 2;

      const out = new Int16Array(Math.max(0, Math.ceil(((frames - index) * L) / M) + 1));
      let n = 0;
      for (;;) {
        const { taps, symmetric } = phases[phase]!;
        // the output's last input must have arrived (a phase-0 output does not use taps[K])
        if (index + (phase === 0 ? 0 : 1) > frames - 1) break;
        const at = index + 1;
        let acc = 0;
        if (symmetric) {
          const last = at + symmetric - 1;
          const half = symmetric >> 1;
          for (let t = 0; t < half; t++) acc += taps[t]! * (work[at + t]! + work[last - t]!);
          if (symmetric & 1) acc += taps[half]! * work[at + half]!;
        } else {
          for (let t = 0; t <= K; t++) acc += taps[t]! * work[at + t]!;
        }
        const v = Math.round(acc);
        out[n++] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
        phase += M;
        index += Math.floor(phase / L);
        phase %= L;
      }
      // keep the last K inputs; the next chunk's indices start after this one's
      work.copyWithin(0, frames, frames + K);
      index -= frames;
      return out.subarray(0, n);
    },
  };
}

/**
 * Splits a byte stream into whole PCM16 frames: keeps the odd tail (a split sample, or
 * half a stereo frame) for the next chunk. Clients may cut frames anywhere.
 */
export function createFrameAligner(bytesPerFrame: number) {
  const none: Uint8Array = new Uint8Array(0);
  let carry = none;
  return {
    /**
     * The whole frames so far: a view of `chunk` itself when it holds whole frames at an
     * even offset and nothing was carried (valid as long as `chunk` is), else a copy in a
     * buffer of its own.
     */
    push(chunk: Uint8Array): Int16Array {
      if (!carry.length && chunk.length % bytesPerFrame === 0 && chunk.byteOffset % 2 === 0 && littleEndian) {
        return new Int16Array(chunk.buffer, chunk.byteOffset, chunk.length >> 1);
      }
      let bytes: Uint8Array;
      if (carry.length) {
        bytes = new Uint8Array(carry.length + chunk.length);
        bytes.set(carry);
        bytes.set(chunk, carry.length);
      } else bytes = chunk;
      const whole = bytes.length - (bytes.length % bytesPerFrame);
      // ArrayBuffer.prototype.slice is a plain copy; the typed arrays' slice is several times slower
      carry = whole === bytes.length ? none : new Uint8Array(bytes.buffer.slice(bytes.byteOffset + whole, bytes.byteOffset + bytes.length));
      // a copy into a buffer of its own, aligned (chunk offsets may be odd)
      const aligned = new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + whole));
      if (!littleEndian) for (let i = 0; i < aligned.length; i++) aligned[i] = ((aligned[i]! & 0xff) << 8) | ((aligned[i]! >> 8) & 0xff);
      return aligned;
    },
    get pending(): number {
      return carry.length;
    },
  };
}

const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
