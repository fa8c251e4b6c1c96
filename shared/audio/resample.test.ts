import { describe, expect, it } from "vitest";
import { createFrameAligner, createResampler } from "./resample";

function sine(rate: number, hz: number, seconds: number, channels = 1) {
  const n = Math.round(rate * seconds);
  const out = new Int16Array(n * channels);
  for (let i = 0; i < n; i++) for (let c = 0; c < channels; c++) out[i * channels + c] = Math.round(8000 * Math.sin((2 * Math.PI * hz * i) / rate));
  return out;
}
const rms = (x: Int16Array, from = 100) => Math.sqrt(x.subarray(from).reduce((s, v) => s + v * v, 0) / (x.length - from));

describe("resampler", () => {
  for (const rate of [8000, 24000, 48000]) {
    it(`${rate} Hz → 16 kHz keeps length and a 440 Hz tone`, () => {
      const r = createResampler(rate, 16000);
      const out = r.push(sine(rate, 440, 1));
      expect(Math.abs(out.length - 16000)).toBeLessThanOrEqual(2);
      const expected = sine(16000, 440, 1);
      expect(Math.abs(rms(out) - rms(expected))).toBeLessThan(300);
    });
  }

  it("attenuates a tone above the output Nyquist when downsampling", () => {
    const out = createResampler(48000, 16000).push(sine(48000, 12000, 1));
    expect(rms(out, 200)).toBeLessThan(400); // input rms ≈ 5657
  });

  for (const [rate, channels, chunk] of [[48000, 2, 202], [24000, 1, 101], [24000, 1, 1], [8000, 1, 33]] as const) {
    it(`streams: chunked output equals whole output (${rate} Hz, ${channels} channel(s), chunks of ${chunk} samples)`, () => {
      const input = sine(rate, 300, 0.5, channels);
      const whole = createResampler(rate, 16000, channels).push(input);
      const r = createResampler(rate, 16000, channels);
      const parts: number[] = [];
      for (let i = 0; i < input.length; i += chunk) parts.push(...r.push(input.subarray(i, i + chunk)));
      expect(parts.length).toBe(whole.length);
      expect(parts).toEqual(Array.from(whole));
    });
  }

  it("filters and interpolates as a low-pass then linear interpolation would (24 kHz: outputs on and between input samples)", () => {
    // an impulse: every output is the kernel's weight at that distance, so on-sample
    // outputs sit on the kernel's centre (the filter's delay, 15 samples) and half-way
    // ones average two neighbouring weights
    const input = new Int16Array(96);
    input[30] = 30000;
    const out = createResampler(24000, 16000).push(input);
    // input position of output m is 1.5·m; the FIR delays by 15: the peak is where 1.5·m = 45
    const peak = out.indexOf(Math.max(...out));
    expect(peak).toBe(30);
    expect(out[29]).toBe(out[31]); // 43.5 and 46.5: symmetric around the centre
    expect(out[29]!).toBeLessThan(out[30]!);
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
