import { describe, expect, it } from "vitest";
import { clusterBic, statsOf } from "./cluster";
import { diarizationErrorRate } from "./der";
import { diarizeFeatures, diarizePcm } from "./diarize";
import { frameFeatures } from "./features";
import { embeddedDiarizer, pcmAudio, speechRegions } from "./embedded";
import { createFrameClassifier } from "../../shared/audio/vad-frames";

/** Deterministic uniform noise in [0, 1). */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a * 1664525 + 1013904223) >>> 0;
    return a / 2 ** 32;
  };
}
const gaussian = (rand: () => number) => Math.sqrt(-2 * Math.log(rand() + 1e-12)) * Math.cos(2 * Math.PI * rand());

/** `frames` vectors of `dims` around `mean` (scale `sd`), as the diarizer's standardized frames are laid out. */
function frames(rand: () => number, n: number, mean: number[], sd: number): Float32Array {
  const out = new Float32Array(n * mean.length);
  for (let i = 0; i < n; i++) mean.forEach((m, d) => (out[i * mean.length + d] = m + sd * gaussian(rand)));
  return out;
}

describe("BIC clustering of segments' Gaussians", () => {
  const rand = random(7);
  const a = [0, 0, 0];
  const b = [2, -1, 1];
  const items = [a, b, a, a, b, b].map((m) => frames(rand, 200, m, 1)).map((z) => statsOf(z, 3, 0, 200));

  it("estimates the count and groups segments of one source", () => {
    const { labels } = clusterBic(items, 3, { threshold: 1 });
    expect(labels).toEqual([0, 1, 0, 0, 1, 1]);
  });

  it("honours an exact count and a range", () => {
    expect(new Set(clusterBic(items, 3, { threshold: 1, exact: 1 }).labels).size).toBe(1);
    expect(new Set(clusterBic(items, 3, { threshold: 1, exact: 3 }).labels).size).toBe(3);
    expect(new Set(clusterBic(items, 3, { threshold: 1, min: 3, max: 4 }).labels).size).toBe(3);
    expect(new Set(clusterBic(items, 3, { threshold: 1000, max: 2 }).labels).size).toBe(1);
  });

  it("keeps one cluster for segments of one source", () => {
    const same = [a, a, a, a].map((m) => statsOf(frames(rand, 200, m, 1), 3, 0, 200));
    expect(clusterBic(same, 3, { threshold: 1 }).labels).toEqual([0, 0, 0, 0]);
  });
});

/** A voiced sound: harmonics of `f0` shaped by two formants, with jitter, `seconds` long. */
function voice(rand: () => number, f0: number, formants: [number, number], seconds: number): Int16Array {
  const n = Math.round(seconds * 16000);
  const out = new Int16Array(n);
  let phase = 0;
  for (let i = 0; i < n; i++) {
    const f = f0 * (1 + 0.03 * Math.sin((2 * Math.PI * i) / 16000 * 3));
    phase += (2 * Math.PI * f) / 16000;
    let s = 0;
    for (let h = 1; h * f0 < 7000; h++) {
      const fh = h * f0;
      const gain = formants.reduce((g, fm) => g + 1 / (1 + ((fh - fm) / 150) ** 2), 0.02);
      s += gain * Math.sin(h * phase);
    }
    // syllables: 4 Hz amplitude modulation
    const env = 0.55 + 0.45 * Math.sin((2 * Math.PI * 4 * i) / 16000);
    out[i] = Math.round(2500 * env * s + 30 * gaussian(rand));
  }
  return out;
}

describe("the embedded diarizer on synthetic voices", () => {
  it("finds two speakers taking turns, and their turns", () => {
    const rand = random(3);
    const low = (s: number) => voice(rand, 110, [600, 1100], s);
    const high = (s: number) => voice(rand, 230, [400, 2600], s);
    const turns = [low(4), high(3), low(5), high(4)];
    const gap = new Int16Array(8000);
    const pcm = new Int16Array(turns.reduce((a, t) => a + t.length + gap.length, 0));
    const reference: { start: number; end: number; speaker: string }[] = [];
    let at = 0;
    turns.forEach((t, k) => {
      pcm.set(t, at);
      reference.push({ start: at / 16000, end: (at + t.length) / 16000, speaker: k % 2 ? "high" : "low" });
      at += t.length + gap.length;
    });
    const speech = reference.map(({ start, end }) => ({ start, end }));
    const found = diarizePcm(pcm, speech);
    expect(new Set(found.map((t) => t.speaker)).size).toBe(2);
    expect(found[0]!.speaker).toBe(0);
    expect(diarizationErrorRate(reference, found).der).toBeLessThan(0.05);
    expect(diarizePcm(pcm, speech, { speakers: 1 }).every((t) => t.speaker === 0)).toBe(true);
    expect(diarizePcm(pcm, [])).toEqual([]);
  });
});

describe("a long recording's voices, the count estimated", () => {
  /**
   * Two "phrases" of one voice, the same average but differently correlated features (as
   * one person's different words are), and a second voice with another average; 5 s
   * segments with 0.5 s pauses, in turns A Y B Y A Y B Y …, `each` segments of each.
   */
  function recording(each: number) {
    const rand = random(11);
    const dims = 6;
    const correlated = (pair: [number, number], mean: number) => () => {
      const v = Array.from({ length: dims }, () => mean + gaussian(rand));
      v[pair[1]] = mean + 0.9 * (v[pair[0]]! - mean) + Math.sqrt(1 - 0.81) * gaussian(rand);
      return v;
    };
    const sources = { A: correlated([0, 1], 0), B: correlated([2, 3], 0), Y: () => Array.from({ length: dims }, () => 1.5 + gaussian(rand)) };
    const order = Array.from({ length: each * 4 }, (_, k) => (k % 2 ? "Y" : k % 4 === 0 ? "A" : "B")) as (keyof typeof sources)[];
    const values = new Float32Array(order.length * 550 * dims);
    order.forEach((source, k) => {
      for (let f = 0; f < 550; f++) values.set(f < 500 ? sources[source]() : Array.from({ length: dims }, () => gaussian(rand)), (k * 550 + f) * dims);
    });
    const speech = order.map((_, k) => ({ start: k * 5.5, end: k * 5.5 + 5 }));
    return { features: { frames: order.length * 550, dims, values }, speech };
  }
  const count = (turns: { speaker: number }[]) => new Set(turns.map((t) => t.speaker)).size;

  it("given over a minute of each phrase, then the phrases the BIC keeps apart are joined by their averages: one voice", () => {
    const { features, speech } = recording(16);
    expect(count(diarizeFeatures(features, speech, {}, { longVoiceDistance: 0 }))).toBe(3);
    expect(count(diarizeFeatures(features, speech))).toBe(2);
    // never joined below the min_speakers asked for
    expect(count(diarizeFeatures(features, speech, { minSpeakers: 3 }))).toBe(3);
  });

  it("given 20 s of each, then they are too short to be judged by their averages and stay apart", () => {
    const { features, speech } = recording(4);
    expect(count(diarizeFeatures(features, speech))).toBe(3);
  });
});

describe("speech regions from 30 ms VAD frames", () => {
  it("fills holes of up to 3 frames and drops runs shorter than 3", () => {
    const f = Uint8Array.from([0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1]);
    expect(speechRegions(f).map((r) => [Math.round(r.start / 0.03), Math.round(r.end / 0.03)])).toEqual([
      [1, 8],
      [18, 22],
    ]);
  });
});

describe("the embedded diarizer reads long audio 60 s at a time", () => {
  it("and labels it as the whole clip at once would be", { timeout: 30_000 }, async () => {
    const rand = random(11);
    const turns = Array.from({ length: 26 }, (_, k) => (k % 2 ? voice(rand, 230, [400, 2600], 4.4) : voice(rand, 110, [600, 1100], 4.6)));
    const gap = new Int16Array(3200);
    const pcm = new Int16Array(turns.reduce((a, t) => a + t.length + gap.length, 0));
    turns.reduce((at, t) => (pcm.set(t, at), at + t.length + gap.length), 0);
    expect(pcm.length / 16000).toBeGreaterThan(120);
    const vad = await createFrameClassifier(2);
    const whole = diarizePcm(pcm, speechRegions(vad.classify(pcm)));
    vad.free();
    const read: [number, number][] = [];
    const pieces = await embeddedDiarizer.diarize({ samples: pcm.length, read: async (a, b) => (read.push([a, b]), pcmAudio(pcm).read(a, b)) }, {});
    expect(read.length).toBe(3);
    expect(pieces).toEqual(whole);
    expect(new Set(pieces.map((t) => t.speaker)).size).toBe(2);
  });
});

describe("MFCC frames", () => {
  it("one every 10 ms of whole 25 ms frames, finite, and apart for different spectra", () => {
    const tone = (hz: number) => Int16Array.from({ length: 16000 }, (_, i) => Math.round(8000 * Math.sin((2 * Math.PI * hz * i) / 16000)));
    const low = frameFeatures(tone(300));
    const high = frameFeatures(tone(3000));
    expect(low.frames).toBe(Math.floor((16000 - 400) / 160) + 1);
    expect(low.dims).toBe(19);
    expect(low.values.every(Number.isFinite)).toBe(true);
    const distance = Math.hypot(...Array.from({ length: 19 }, (_, d) => low.values[50 * 19 + d]! - high.values[50 * 19 + d]!));
    expect(distance).toBeGreaterThan(5);
    expect(frameFeatures(new Int16Array(399)).frames).toBe(0);
  });
});
