import createSpeexModule from "@echogarden/speex-resampler-wasm/simd";

/**
 * Streaming PCM16 resampler for the realtime plane: a client declares 8, 16, 24 or
 * 48 kHz (mono or interleaved stereo) and everything behind the gateway sees 16 kHz
 * mono. Stereo is averaged to mono, then the Speex resampler (SpeexDSP's, compiled to
 * WASM: @echogarden/speex-resampler-wasm, the family of the fvad WASM the VAD uses)
 * converts the rate. State carries across chunks, so splitting a stream anywhere gives
 * the same output as resampling it whole.
 *
 * Why Speex and not the filter this file used to hold (31-tap windowed sinc, then linear
 * interpolation): that filter rolled off the top of the speech band, and PocketSphinx's
 * word error rate on jfk.wav went from 0.27 at 16 kHz to 0.59 at 24 kHz and 0.68 at
 * 48 kHz (issue 44). Speex's polyphase sinc is flat to just under the output Nyquist
 * frequency and is a well-kept C library.
 *
 * Latency compensated: a sinc resampler's output trails its input by half its filter
 * (RESAMPLER_QUALITY's: 2.5 ms), and PocketSphinx's 10 ms frames hear a shift that is
 * not a multiple of 10 ms as a different voice (leading zeros of 1, 2, 3 or 5 ms change
 * pocketsphinx_continuous's text on jfk.wav; 0 and 10 ms do not). So the resampler skips
 * its leading zeros (speex_resampler_skip_zeros): output sample m sits at input time
 * m / outRate, as if the audio had been 16 kHz all along. The last samples' worth of
 * that latency stays inside the filter until more input comes or `flush()` (a session's
 * end) feeds silence through it.
 *
 * Quality: RESAMPLER_QUALITY (Speex's 0…10), chosen by measurement (docs/design/realtime.md
 * "Sample rates and the resampler").
 */
export interface Resampler {
  readonly inRate: number;
  readonly outRate: number;
  readonly channels: number;
  /**
   * Interleaved input samples (a whole number of frames) → output samples. At the same
   * rate in mono the output is the input itself (no copy: the frame path of the
   * realtime gateway is per frame, 25,000 a second at 1,000 sessions); otherwise an
   * array of its own.
   */
  push(samples: Int16Array): Int16Array;
  /** The output still inside the filter, as if silence followed the input: the stream's end. */
  flush(): Int16Array;
  /** Frees the WASM state; push and flush return nothing after it. Idempotent. */
  free(): void;
}

/**
 * Speex quality 0…10 (filter length 8…256 taps at the output rate), chosen by
 * measurement (`./scripts/bench.sh wer --sweep`, the table in docs/realtime.md "Sample
 * rates and the resampler"): qualities 3 to 7 give PocketSphinx the 16 kHz figure on the
 * seven labelled clips at 24 and 48 kHz (WER 0.308; the old filter 0.452 and 0.337);
 * 5 is the lowest flat to 7 kHz (−0.2 dB; 3 is −3 dB there), at about 1 ms of CPU per
 * second of audio, with 2.5 ms of latency (compensated, above).
 */
export const RESAMPLER_QUALITY = 5;

interface SpeexModule {
  _speex_resampler_init(channels: number, inRate: number, outRate: number, quality: number, err: number): number;
  _speex_resampler_skip_zeros(st: number): number;
  _speex_resampler_get_input_latency(st: number): number;
  _speex_resampler_process_int(st: number, channel: number, input: number, inLen: number, output: number, outLen: number): number;
  _speex_resampler_destroy(st: number): void;
  _malloc(bytes: number): number;
  _free(ptr: number): void;
  HEAP16: Int16Array;
  HEAPU32: Uint32Array;
}

// Loaded once per process (top-level await: creating a resampler stays synchronous);
// calls are synchronous, so every resampler shares the scratch buffers below.
const speex = (await (createSpeexModule as unknown as () => Promise<SpeexModule>)()) as SpeexModule;
const lengths = speex._malloc(8); // in_len, out_len (uint32 each)
let scratch = { input: 0, output: 0, samples: 0 };

/** Scratch room for `inSamples` input samples and their output (at most `outSamples`). */
function room(inSamples: number, outSamples: number) {
  const need = Math.max(inSamples, outSamples);
  if (need > scratch.samples) {
    if (scratch.samples) {
      speex._free(scratch.input);
      speex._free(scratch.output);
    }
    const samples = Math.max(need, 4096);
    scratch = { input: speex._malloc(samples * 2), output: speex._malloc(samples * 2), samples };
  }
  return scratch;
}

// a session that ends without free() (an exception on its way out) still gives its state back
const orphans = new FinalizationRegistry<number>((st) => speex._speex_resampler_destroy(st));

export function createResampler(inRate: number, outRate: number, channels = 1, quality = RESAMPLER_QUALITY): Resampler {
  if (!(Number.isInteger(inRate) && Number.isInteger(outRate) && inRate > 0 && outRate > 0)) throw new RangeError("sample rates must be positive integers");
  if (channels !== 1 && channels !== 2) throw new RangeError("channels must be 1 or 2");
  if (!(Number.isInteger(quality) && quality >= 0 && quality <= 10)) throw new RangeError("quality must be an integer 0…10");
  const empty = new Int16Array(0);
  const mono = (samples: Int16Array): Int16Array => {
    if (channels === 1) return samples;
    const frames = samples.length >> 1;
    const out = new Int16Array(frames);
    for (let i = 0; i < frames; i++) out[i] = Math.round((samples[2 * i]! + samples[2 * i + 1]!) / 2);
    return out;
  };
  if (inRate === outRate) return { inRate, outRate, channels, push: mono, flush: () => empty, free: () => undefined };

  let st = speex._speex_resampler_init(1, inRate, outRate, quality, lengths);
  if (!st) throw new Error(`speex_resampler_init failed (${inRate} → ${outRate} Hz, error ${speex.HEAPU32[lengths >> 2]})`);
  speex._speex_resampler_skip_zeros(st);
  const handle = {};
  orphans.register(handle, st, handle);
  const latency = speex._speex_resampler_get_input_latency(st);

  /** Runs `input` through the filter: its output, in an array of its own. */
  const run = (input: Int16Array): Int16Array => {
    if (!st || input.length === 0) return empty;
    // the filter holds at most `latency` inputs' worth beyond what this chunk's length gives
    const most = Math.ceil(((input.length + 2 * latency) * outRate) / inRate) + 2;
    const { input: inPtr, output: outPtr } = room(input.length, most);
    speex.HEAP16.set(input, inPtr >> 1);
    speex.HEAPU32[lengths >> 2] = input.length;
    speex.HEAPU32[(lengths >> 2) + 1] = most;
    speex._speex_resampler_process_int(st, 0, inPtr, lengths, outPtr, lengths + 4);
    const consumed = speex.HEAPU32[lengths >> 2]!;
    const produced = speex.HEAPU32[(lengths >> 2) + 1]!;
    if (consumed !== input.length) throw new Error(`speex resampler consumed ${consumed} of ${input.length} samples`);
    // HEAP16 is read after the call: a memory growth replaces the view
    return speex.HEAP16.slice(outPtr >> 1, (outPtr >> 1) + produced);
  };

  return {
    inRate,
    outRate,
    channels,
    push: (samples) => run(mono(samples)),
    flush: () => run(new Int16Array(latency)),
    free() {
      if (!st) return;
      orphans.unregister(handle);
      speex._speex_resampler_destroy(st);
      st = 0;
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
