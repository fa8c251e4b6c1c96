/**
 * Streaming PCM16 resampler for the realtime plane: a client declares 8, 16, 24 or
 * 48 kHz (mono or interleaved stereo) and everything behind the gateway sees 16 kHz
 * mono. Stereo is averaged to mono; downsampling runs a windowed-sinc low-pass first
 * (cut-off just under the output Nyquist) so 48 kHz speech does not alias into the
 * speech band; then linear interpolation. State carries across chunks, so splitting
 * a stream anywhere gives the same output as resampling it whole.
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

function lowPassKernel(cutoff: number): Float32Array {
  // cutoff as a fraction of the input sample rate (0..0.5); Blackman-windowed sinc.
  const k = new Float32Array(TAPS);
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

export function createResampler(inRate: number, outRate: number, channels = 1): Resampler {
  if (!(inRate > 0 && outRate > 0)) throw new RangeError("sample rates must be positive");
  if (channels !== 1 && channels !== 2) throw new RangeError("channels must be 1 or 2");
  const step = inRate / outRate;
  const kernel = inRate > outRate ? lowPassKernel((0.45 * outRate) / inRate) : null;
  // FIR history (last TAPS-1 mono input samples) and the interpolation state.
  const history = new Float32Array(TAPS - 1);
  let work = new Float32Array(0);
  let prev = 0; // last filtered sample of the previous chunk
  let pos = 0; // fractional read position relative to the current chunk's first sample (may be negative: -1 = prev)

  const identity = inRate === outRate;

  return {
    inRate,
    outRate,
    channels,
    push(samples: Int16Array): Int16Array {
      const frames = Math.floor(samples.length / channels);
      if (identity && channels === 1) return samples;
      const mono = new Float32Array(frames);
      if (channels === 1) for (let i = 0; i < frames; i++) mono[i] = samples[i]!;
      else for (let i = 0; i < frames; i++) mono[i] = (samples[2 * i]! + samples[2 * i + 1]!) / 2;
      if (identity) return floatToPcm(mono);

      let filtered = mono;
      if (kernel) {
        // the history and this chunk in one buffer: the FIR's inner loop reads it without a branch
        const h = TAPS - 1;
        if (work.length < h + frames) work = new Float32Array(h + frames);
        work.set(history);
        work.set(mono, h);
        filtered = new Float32Array(frames);
        // the kernel is symmetric: fold the window, half the multiplications
        const mid = h / 2;
        const km = kernel[mid]!;
        for (let i = 0; i < frames; i++) {
          let acc = km * work[i + mid]!;
          for (let t = 0; t < mid; t++) acc += kernel[t]! * (work[i + t]! + work[i + h - t]!);
          filtered[i] = acc;
        }
        // keep the last h raw samples for the next chunk
        history.set(work.subarray(frames, frames + h));
      }

      // straight into PCM (no array of numbers to grow): at most this many outputs
      const out = new Int16Array(Math.max(0, Math.ceil((frames - pos) / step) + 1));
      let n = 0;
      // pos indexes `filtered`, with -1 meaning `prev`.
      while (pos <= frames - 1 && frames > 0) {
        const i = Math.floor(pos);
        const frac = pos - i;
        const a = i < 0 ? prev : filtered[i]!;
        const b = filtered[i + 1 < frames ? i + 1 : frames - 1]!;
        if (i + 1 >= frames && frac > 0) break;
        const v = Math.round(a + (b - a) * frac);
        out[n++] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
        pos += step;
      }
      if (frames > 0) {
        prev = filtered[frames - 1]!;
        pos -= frames;
      }
      return out.subarray(0, n);
    },
  };
}

function floatToPcm(values: ArrayLike<number>): Int16Array {
  const out = new Int16Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = Math.round(values[i]!);
    out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
  }
  return out;
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
