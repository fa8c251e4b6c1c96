import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAudio } from "../shared/audio/decode";
import { processStat } from "../shared/proc-cpu";
import { encodeWav } from "../shared/audio/wav";
import { wordErrorRate } from "../shared/workers/wer";
import type { TranscriptionEngine } from "../shared/workers/types";
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { FIXTURES_DIR } from "./support/fixtures";

const FIX = FIXTURES_DIR;
const LIBRI = "/usr/share/pocketsphinx/test/data/librivox";

async function librivoxClips(): Promise<{ file: string; text: string }[]> {
  const lines = (await readFile(`${LIBRI}/transcription`, "utf8")).split("\n").filter(Boolean);
  return lines.map((l) => {
    const m = /^(.*)\(([^)]+)\)\s*$/.exec(l)!;
    return { file: `${LIBRI}/${m[2]}.wav`, text: m[1]!.replace(/<\/?s>/g, "").trim() };
  });
}

describe("embedded PocketSphinx engine on real speech", () => {
  let engine: TranscriptionEngine;
  beforeAll(async () => {
    engine = await createPocketsphinxEngine({ processes: 2 });
  });
  afterAll(async () => {
    await engine.close();
  });

  it("stays loaded: warm, and a second request pays no model load", async () => {
    expect(engine.warm()).toBe(true);
    const { pcm } = await decodeAudio(await readFile(`${FIX}/ldc93s1.wav`));
    const t0 = performance.now();
    await engine.transcribe({ pcm });
    const first = performance.now() - t0;
    const t1 = performance.now();
    await engine.transcribe({ pcm });
    const second = performance.now() - t1;
    // A 3 s clip decodes in about a second; a model load alone would add ~0.5 s each time.
    expect(second).toBeLessThan(first * 2 + 500);
  });

  it("holds WER below 50% on the LibriVox clips, with monotonic in-clip word timings", async () => {
    const clips = await librivoxClips();
    expect(clips.length).toBeGreaterThanOrEqual(5);
    let errors = 0;
    let words = 0;
    for (const clip of clips) {
      const { pcm, durationSeconds } = await decodeAudio(await readFile(clip.file));
      const r = await engine.transcribe({ pcm });
      const w = wordErrorRate(clip.text, r.text);
      errors += w.errors;
      words += w.referenceWords;
      console.log(`WER ${(w.wer * 100).toFixed(1)}%  ${clip.file.split("/").pop()}: ${r.text}`);
      expect(r.words.length).toBeGreaterThan(3);
      let last = 0;
      for (const word of r.words) {
        expect(word.start).toBeGreaterThanOrEqual(last);
        expect(word.end).toBeGreaterThanOrEqual(word.start);
        expect(word.end).toBeLessThanOrEqual(durationSeconds + 0.01);
        last = word.start;
      }
      for (const seg of r.segments) expect(seg.end).toBeGreaterThanOrEqual(seg.start);
      expect(r.duration).toBeCloseTo(durationSeconds, 2);
    }
    const wer = errors / words;
    console.log(`LibriVox WER ${(wer * 100).toFixed(1)}% over ${words} words`);
    expect(wer).toBeLessThan(0.5);
  });

  it("gives the same text for an MP3 and a WAV of the same speech", async () => {
    const clip = (await librivoxClips())[3]!;
    const wavBytes = await readFile(clip.file);
    const mp3Bytes = execFileSync("ffmpeg", ["-v", "error", "-i", clip.file, "-b:a", "128k", "-f", "mp3", "pipe:1"], { maxBuffer: 1 << 26 });
    const wav = await decodeAudio(wavBytes);
    const mp3 = await decodeAudio(mp3Bytes);
    // MP3 adds encoder delay and padding (~0.1 s at 16 kHz).
    expect(Math.abs(wav.durationSeconds - mp3.durationSeconds)).toBeLessThan(0.2);
    const [a, b] = await Promise.all([engine.transcribe({ pcm: wav.pcm }), engine.transcribe({ pcm: mp3.pcm })]);
    console.log(`WAV: ${a.text}\nMP3: ${b.text}`);
    expect(b.text).toBe(a.text);
  });

  it("prints WER on the labelled fixtures (jfk.wav, jfk.mp3, ldc93s1.wav)", async () => {
    const jfk = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.";
    const cases = [
      ["jfk.wav", jfk],
      ["jfk.mp3", jfk],
      ["ldc93s1.wav", "She had your dark suit in greasy wash water all year."],
    ] as const;
    for (const [file, ref] of cases) {
      const r = await engine.transcribe({ pcm: (await decodeAudio(await readFile(`${FIX}/${file}`))).pcm });
      const w = wordErrorRate(ref, r.text).wer;
      console.log(`${file} WER ${(w * 100).toFixed(1)}%: ${r.text}`);
      // PocketSphinx is weak on the noisy JFK recording; this still catches a broken decode.
      expect(w).toBeLessThan(1);
      expect(r.words.length).toBeGreaterThan(2);
    }
  });

  it("uses the prompt as vocabulary biasing for that request only", async () => {
    const { pcm } = await decodeAudio(await readFile(`${LIBRI}/sense_and_sensibility_01_austen_64kb-0870.wav`));
    const plain = await engine.transcribe({ pcm });
    const biased = await engine.transcribe({ pcm, prompt: "Mister John Dashwood, prudently." });
    const after = await engine.transcribe({ pcm });
    console.log(`no prompt: ${plain.text}\nprompt:    ${biased.text}`);
    expect(plain.words.map((w) => w.word)).not.toContain("dashwood");
    expect(biased.words.map((w) => w.word)).toContain("dashwood");
    expect(biased.words.map((w) => w.word)).toContain("prudently");
    const ref = "and mister john dashwood had then leisure to consider how much there might be prudently in his power to do for them";
    expect(wordErrorRate(ref, biased.text).wer).toBeLessThan(wordErrorRate(ref, plain.text).wer);
    // the next request without a prompt is not affected
    expect(after.text).toBe(plain.text);
  });

  it("replaces a crashed engine process and hands its clip to the next; a clip that loses a second process fails retryably; later clips succeed", async () => {
    const { pcm } = await decodeAudio(await readFile(`${FIX}/jfk.wav`));
    const children = () =>
      execFileSync("pgrep", ["-P", String(process.pid), "ps-worker"], { encoding: "utf8" }).split("\n").filter(Boolean).map(Number);
    const ticks = (pid: number) => processStat(pid)?.ticks ?? 0;
    /** The process of `pids` that starts decoding (its CPU time moves past `base`'s). */
    const decoding = async (pids: number[]): Promise<number> => {
      const base = new Map(pids.map((pid) => [pid, ticks(pid)]));
      for (let i = 0; i < 1000; i++) {
        const busy = pids.find((pid) => ticks(pid) > base.get(pid)! + 3);
        if (busy) return busy;
        await new Promise((r) => setTimeout(r, 10));
      }
      throw new Error("no process started decoding");
    };
    const poolOfTwo = async (without: number[]) => {
      const until = Date.now() + 20_000;
      // both processes loaded and in rotation (the engine's concurrency counts those)
      while ((children().filter((p) => !without.includes(p)).length < 2 || engine.concurrency < 2) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
      expect(engine.concurrency).toBe(2);
      return children().filter((p) => !without.includes(p));
    };
    const jfk = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.";

    // Killed under the clip: the other process takes it, and the pool starts a new one.
    const pids = children();
    expect(pids).toHaveLength(2);
    const once = engine.transcribe({ pcm });
    const first = await decoding(pids);
    process.kill(first, "SIGKILL");
    expect(wordErrorRate(jfk, (await once).text).wer).toBeLessThan(0.5);

    // Killed under it twice: the clip fails, retryably.
    const again = await poolOfTwo([first]);
    const twice = engine.transcribe({ pcm });
    const a = await decoding(again);
    process.kill(a, "SIGKILL");
    const b = await decoding(again.filter((p) => p !== a));
    process.kill(b, "SIGKILL");
    await expect(twice).rejects.toMatchObject({ code: "engine_crashed", retryable: true });

    await poolOfTwo([first, a, b]);
    const small = (await decodeAudio(await readFile(`${FIX}/ldc93s1.wav`))).pcm;
    const r = await engine.transcribe({ pcm: small });
    expect(r.words.length).toBeGreaterThan(3);
  });

  it("transcribes silence and an empty clip without error (empty text)", async () => {
    const silence = await engine.transcribe({ pcm: new Int16Array(16_000) });
    expect(silence.duration).toBe(1);
    expect(silence.words.every((w) => w.end <= 1)).toBe(true);
    const empty = await engine.transcribe({ pcm: new Int16Array(0) });
    expect(empty).toMatchObject({ text: "", duration: 0, segments: [], words: [] });
  });

  it("decodes other containers ffmpeg knows and rejects non-audio with 415", async () => {
    const { pcm } = await decodeAudio(await readFile(`${FIX}/ldc93s1.wav`));
    const wav = encodeWav(pcm);
    const dir = await mkdtemp(join(tmpdir(), "ps-test-"));
    for (const [ext, codec] of [["flac", "flac"], ["ogg", "libopus"], ["m4a", "aac"], ["webm", "libopus"], ["mp3", "libmp3lame"]] as const) {
      const path = join(dir, `clip.${ext}`);
      execFileSync("ffmpeg", ["-v", "error", "-f", "wav", "-i", "pipe:0", "-c:a", codec, path], { input: wav });
      const d = await decodeAudio(await readFile(path));
      expect(Math.abs(d.durationSeconds - pcm.length / 16000)).toBeLessThan(0.1);
    }
    await rm(dir, { recursive: true, force: true });
    await expect(decodeAudio(Buffer.from("this is not audio at all, just text"))).rejects.toMatchObject({ status: 415, code: "unsupported_audio" });
    // a playlist pointing at a URL is not media: ffmpeg must not fetch it
    const playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nhttp://127.0.0.1:9/x.ts\n#EXT-X-ENDLIST\n";
    await expect(decodeAudio(Buffer.from(playlist))).rejects.toMatchObject({ status: 415, code: "unsupported_audio" });
    await expect(decodeAudio(await readFile(`${FIX}/jfk.mp3`), { maxSeconds: 5 })).rejects.toMatchObject({ status: 413, code: "audio_too_long" });
  });
});
