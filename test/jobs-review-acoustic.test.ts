import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAudio } from "../shared/audio/decode";
import type { JobSegment } from "../schemas/jobs";
import { ensurePocketsphinxBinary } from "../shared/pocketsphinx/build";
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { createAligner, type Aligner } from "../services/jobs/review-acoustic";
import { embeddedReviewer, type SliceReviewInput } from "../services/jobs/review";
import { fixturePath } from "./support/fixtures";

// The embedded reviewer's acoustic check against the real engine: ps-worker's
// alignment request, and the reviewer's conservative fallbacks (no aligner, an aligner
// that cannot start, no audio) on a real transcript of real speech.
const LDC = "she had to adapt to increase you watch for all year";
const CLIP = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0870.wav";

let aligner: Aligner;
let ldc: Int16Array;
let clip: Int16Array;
let segments: JobSegment[];

beforeAll(async () => {
  aligner = createAligner();
  ldc = (await decodeAudio(await readFile(fixturePath("ldc93s1.wav")))).pcm;
  clip = (await decodeAudio(await readFile(CLIP))).pcm;
  const engine = await createPocketsphinxEngine({ processes: 1 });
  const r = await engine.transcribe({ pcm: clip });
  await engine.close();
  segments = r.segments.map((s, id) => ({ id, start_time: s.start, end_time: s.end, duration: s.end - s.start, text: s.text.trim(), confidence: 0.5 }));
}, 120_000);

afterAll(async () => {
  await aligner?.close();
});

const whole = (pcm: Int16Array, words: string) => ({ fromSample: 0, toSample: pcm.length, words: words.split(" ") });

describe("ps-worker alignment request", () => {
  it("scores each word sequence the same whatever was aligned before it, with word frames in order", async () => {
    const said = whole(ldc, "she had your dark suit in greasy wash water all year");
    const heard = whole(ldc, LDC);
    const [a, b] = await aligner.align(ldc, [said, heard], new Map());
    const [b2, a2] = await aligner.align(ldc, [heard, said], new Map());
    expect(a!.ascr).toBe(a2!.ascr);
    expect(b!.ascr).toBe(b2!.ascr);
    expect(a!.ascr).not.toBe(b!.ascr);
    expect(a!.words.map((w) => w[0])).toEqual(said.words);
    for (let i = 1; i < a!.words.length; i++) expect(a!.words[i]![1]).toBeGreaterThanOrEqual(a!.words[i - 1]![2]);
    expect(a!.frames).toBeGreaterThan(250);
  });

  it("aligns a word the dictionary lacks only with a pronunciation supplied", async () => {
    const words = "she had your dark suit in greasy washwater all year";
    const [without] = await aligner.align(ldc, [whole(ldc, words)], new Map());
    expect(without).toBeNull();
    const [withIt] = await aligner.align(ldc, [whole(ldc, words)], new Map([["washwater", ["W", "AA", "SH", "W", "AO", "T", "ER"]]]));
    expect(withIt!.words.map((w) => w[0])).toContain("washwater");
  });
});

describe("ps-worker serving transcription and alignment in one process", () => {
  it("transcribes a clip the same before and after an alignment that added a word", async () => {
    const child = spawn(await ensurePocketsphinxBinary(), ["/usr/share/pocketsphinx/model/en-us"], { stdio: ["pipe", "pipe", "ignore"] });
    const lines = createInterface({ input: child.stdout });
    const pending: ((line: string) => void)[] = [];
    lines.on("line", (line) => pending.shift()?.(line));
    const answer = () => new Promise<string>((resolve) => pending.push(resolve));
    const request = (magic: number, text: string, pcm: Int16Array) => {
      const head = Buffer.alloc(12);
      head.writeUInt32LE(magic, 0);
      head.writeUInt32LE(pcm.length, 4);
      head.writeUInt32LE(Buffer.byteLength(text), 8);
      const line = answer();
      child.stdin.write(Buffer.concat([head, Buffer.from(text), Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength)]));
      return line;
    };
    try {
      expect(await answer()).toContain('"ready":true');
      const before = await request(0x31535350, "", ldc);
      const aligned = JSON.parse(await request(0x33535350, `word washwater W AA SH W AO T ER\nalign 0 ${ldc.length} she had your dark suit in greasy washwater all year`, ldc));
      expect(aligned.alignments[0].words.map((w: [string]) => w[0])).toContain("washwater");
      const after = await request(0x31535350, "", ldc);
      expect(after).toBe(before);
      expect(before).toContain('"w":"year"');
    } finally {
      child.stdin.end();
    }
  });
});

describe("embedded reviewer fallbacks", () => {
  const input = (audio: SliceReviewInput["audio"]): SliceReviewInput => ({
    metadata: { characters: ["John Dashwood", "Elinor"] },
    language: "en",
    slice: { index: 0, start_time: 0, end_time: clip.length / 16_000 },
    segments,
    audio,
  });

  it("corrects the misheard name when the audio fits it", async () => {
    expect(segments.map((s) => s.text).join(" ")).toContain("guess would");
    const review = await embeddedReviewer(aligner).reviewSlice(input(async () => ({ pcm: clip, startTime: 0 })));
    expect(review.corrections.map((c) => c.text).join(" ")).toContain("Dashwood");
    expect(review.annotations!.find((a) => a.suggestion.includes("Dashwood"))!.reason).toMatch(/the audio fits/);
  });

  it("changes nothing without an aligner, with one that cannot start, or without audio", async () => {
    const broken = createAligner({ binary: "/nonexistent/ps-worker" });
    for (const [reviewer, audio] of [
      [embeddedReviewer(), async () => ({ pcm: clip, startTime: 0 })],
      [embeddedReviewer(broken), async () => ({ pcm: clip, startTime: 0 })],
      [embeddedReviewer(aligner), async () => undefined],
    ] as const) {
      const review = await reviewer.reviewSlice(input(audio));
      expect(review.corrections).toEqual([]);
      expect(review.annotations!.length).toBeGreaterThan(0);
      for (const a of review.annotations!) {
        expect(a.confidence).toBeLessThan(0.8);
        expect(a.reason).toMatch(/not checked against the audio/);
      }
      expect(review.notes).toMatch(/ 0 checked against the audio, 0 confident/);
    }
    await broken.close();
  });
});
