import { describe, expect, it } from "vitest";
import { createFrameAligner, createResampler } from "./resample";

function sine(rate: number, hz: number, seconds: number, channels = 1, amplitude = 8000) {
  const n = Math.round(rate * seconds);
  const out = new Int16Array(n * channels);
  for (let i = 0; i < n; i++) for (let c = 0; c < channels; c++) out[i * channels + c] = Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / rate));
  return out;
}
/** RMS away from both ends (the filter's edges). */
const rms = (x: Int16Array, edge = 200) => {
  const mid = x.subarray(edge, x.length - edge);
  return Math.sqrt(mid.reduce((s, v) => s + v * v, 0) / mid.length);
};
const db = (a: number, b: number) => 20 * Math.log10(a / b);
/** The whole stream: pushed in one piece, then flushed. */
const oneShot = (inRate: number, input: Int16Array, channels = 1) => {
  const r = createResampler(inRate, 16000, channels);
  const out = [...r.push(input), ...r.flush()];
  r.free();
  return out;
};

describe("resampler (Speex)", () => {
  it("passband: a 6 kHz tone at 24 → 16 kHz keeps its amplitude within 1 dB", () => {
    const input = sine(24000, 6000, 1);
    const out = Int16Array.from(oneShot(24000, input));
    expect(Math.abs(db(rms(out), rms(input)))).toBeLessThan(1);
  });

  it("passband: a 7 kHz tone at 48 → 16 kHz keeps its amplitude within 1 dB", () => {
    const input = sine(48000, 7000, 1);
    const out = Int16Array.from(oneShot(48000, input));
    expect(Math.abs(db(rms(out), rms(input)))).toBeLessThan(1);
  });

  for (const [rate, hz] of [[24000, 9000], [48000, 9000], [48000, 20000]] as const) {
    it(`stopband: a ${hz / 1000} kHz tone at ${rate / 1000} → 16 kHz is removed (at least 40 dB down)`, () => {
      const input = sine(rate, hz, 1);
      const out = Int16Array.from(oneShot(rate, input));
      expect(db(rms(out), rms(input))).toBeLessThan(-40);
    });
  }

  for (const rate of [8000, 24000, 48000]) {
    it(`${rate} Hz → 16 kHz: the output is the input's length at 16 kHz (pushed then flushed), a 440 Hz tone unchanged`, () => {
      const input = sine(rate, 440, 1);
      const out = Int16Array.from(oneShot(rate, input));
      expect(out.length).toBe(16000);
      expect(Math.abs(db(rms(out), rms(input)))).toBeLessThan(0.1);
      // an odd length rounds up: ⌈n · 16000 / rate⌉
      expect(oneShot(rate, input.subarray(0, 1001)).length).toBe(Math.ceil((1001 * 16000) / rate));
    });
  }

  for (const [rate, at] of [[24000, 3000], [48000, 6000], [8000, 1000]] as const) {
    it(`latency compensated: an impulse at input sample ${at} (${rate} Hz) lands on output sample ${(at * 16000) / rate}`, () => {
      const input = new Int16Array(rate / 4);
      input[at] = 30000;
      const out = oneShot(rate, input);
      expect(out.indexOf(Math.max(...out))).toBe((at * 16000) / rate);
    });
  }

  it("latency compensated from the first sample: speech-like onset is not delayed (the first output follows the first input)", () => {
    // a step at sample 0: the output's half-way point is at its start, not 2.5 ms later
    const input = new Int16Array(2400).fill(10000);
    const out = createResampler(24000, 16000).push(input);
    expect(out[0]!).toBeGreaterThan(4000);
    expect(out[10]!).toBeGreaterThan(9000);
  });

  for (const [rate, channels, chunk] of [[48000, 2, 202], [24000, 1, 101], [24000, 1, 1], [8000, 1, 33], [24000, 1, 480]] as const) {
    it(`streams: chunked output equals one-shot output (${rate} Hz, ${channels} channel(s), chunks of ${chunk} samples)`, () => {
      const input = sine(rate, 300, 0.5, channels);
      const whole = oneShot(rate, input, channels);
      const r = createResampler(rate, 16000, channels);
      const parts: number[] = [];
      for (let i = 0; i < input.length; i += chunk) parts.push(...r.push(input.subarray(i, i + chunk)));
      parts.push(...r.flush());
      r.free();
      expect(parts.length).toBe(whole.length);
      expect(parts).toEqual(whole);
    });
  }

  it("stereo is averaged to mono before resampling", () => {
    const left = sine(48000, 440, 0.2);
    const stereo = new Int16Array(left.length * 2);
    for (let i = 0; i < left.length; i++) stereo[2 * i] = left[i]!; // right channel silent
    const half = Int16Array.from(left, (v) => Math.round(v / 2));
    expect(oneShot(48000, stereo, 2)).toEqual(oneShot(48000, half));
  });

  it("16 kHz mono is passed through untouched, without a copy; freed resamplers return nothing", () => {
    const input = sine(16000, 440, 0.1);
    const same = createResampler(16000, 16000);
    expect(same.push(input)).toBe(input);
    expect(same.flush().length).toBe(0);
    const r = createResampler(24000, 16000);
    r.free();
    r.free();
    expect(r.push(sine(24000, 440, 0.1)).length).toBe(0);
  });

  it("aligner hands back a view of a whole, even-aligned chunk, and a copy once bytes were carried", () => {
    const bytes = new Uint8Array(Int16Array.from([5, -6, 7, -8]).buffer);
    const a = createFrameAligner(2);
    const view = a.push(bytes);
    expect(view.buffer).toBe(bytes.buffer);
    expect([...view]).toEqual([5, -6, 7, -8]);
    a.push(bytes.subarray(0, 1));
    const copy = a.push(bytes.subarray(1, 4));
    expect(copy.buffer).not.toBe(bytes.buffer);
    expect([...copy]).toEqual([5, -6]);
  });
  it("aligner keeps odd bytes across chunks", () => {
    const samples = Int16Array.from([1, -2, 300, -400, 32767, -32768]);
    const bytes = new Uint8Array(samples.buffer);
    const a = createFrameAligner(2);
    const got = [...a.push(bytes.subarray(0, 3)), ...a.push(bytes.subarray(3, 4)), ...a.push(bytes.subarray(4, 11))];
    expect(a.pending).toBe(1);
    got.push(...a.push(bytes.subarray(11)));
    expect(got).toEqual(Array.from(samples));
  });
});
