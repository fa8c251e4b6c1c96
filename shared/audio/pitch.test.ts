import { describe, expect, it } from "vitest";
import { semitones, trackPitch } from "./pitch";

/** A voiced-like tone at 16 kHz: a fundamental `hz(t)` with two harmonics. */
function tone(hz: (t: number) => number, seconds = 0.5, amplitude = 8000): Int16Array {
  const pcm = new Int16Array(Math.round(16000 * seconds));
  let phase = 0;
  for (let i = 0; i < pcm.length; i++) {
    phase += (2 * Math.PI * hz(i / 16000)) / 16000;
    pcm[i] = Math.round(amplitude * (Math.sin(phase) + 0.5 * Math.sin(2 * phase) + 0.3 * Math.sin(3 * phase)));
  }
  return pcm;
}

/** A deterministic pseudo-random noise (xorshift), so the test never flakes. */
function noise(samples: number, amplitude: number): Int16Array {
  let s = 0x2545f491;
  return Int16Array.from({ length: samples }, () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return Math.round(((s >>> 0) / 0xffffffff - 0.5) * 2 * amplitude);
  });
}

const pitched = (pcm: Int16Array) => trackPitch(pcm).flatMap((f) => (f.f0 === null ? [] : [f.f0]));

describe("pitch tracker", () => {
  it("given steady tones from 70 to 380 Hz, reads each within 1%", () => {
    for (const hz of [70, 110, 220, 380]) {
      const f0 = pitched(tone(() => hz));
      expect(f0.length).toBeGreaterThan(40);
      for (const f of f0) expect(Math.abs(f - hz) / hz).toBeLessThan(0.01);
    }
  });
  it("given a falling glide (200 → 120 Hz), reads falling; a rising one (120 → 200 Hz), rising", () => {
    const falling = pitched(tone((t) => 200 - 160 * t));
    const rising = pitched(tone((t) => 120 + 160 * t));
    expect(semitones(falling.at(-1)!, falling[0]!)).toBeLessThan(-7);
    expect(semitones(rising.at(-1)!, rising[0]!)).toBeGreaterThan(7);
    for (let i = 1; i < falling.length; i++) expect(falling[i]!).toBeLessThan(falling[i - 1]!);
    for (let i = 1; i < rising.length; i++) expect(rising[i]!).toBeGreaterThan(rising[i - 1]!);
  });
  it("given noise, or silence, reads no pitch at all; levels in dBFS either way", () => {
    expect(pitched(noise(8000, 12000))).toEqual([]);
    const quiet = trackPitch(new Int16Array(8000));
    expect(quiet.length).toBeGreaterThan(0);
    expect(quiet.every((f) => f.f0 === null && f.db < -50)).toBe(true);
    expect(trackPitch(tone(() => 150))[0]!.db).toBeGreaterThan(-20);
  });
  it("given a tone after silence, a frame's time is the centre of its window (10 ms steps)", () => {
    const pcm = new Int16Array(8000);
    pcm.set(tone(() => 150, 0.25), 4000);
    const frames = trackPitch(pcm);
    expect(frames[1]!.atSample - frames[0]!.atSample).toBe(160);
    expect(frames.filter((f) => f.f0 !== null && f.atSample < 4000 - 200)).toEqual([]);
    expect(frames.find((f) => f.atSample > 4400 && f.atSample < 6000)?.f0).toBeCloseTo(150, 0);
  });
  it("given less audio than one analysis window (42 ms), no frames", () => {
    expect(trackPitch(new Int16Array(600))).toEqual([]);
  });
});
