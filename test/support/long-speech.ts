import { readFileSync } from "node:fs";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "./fixtures";

const LIBRI = "/usr/share/pocketsphinx/test/data/librivox";
const RATE = 16_000;

/** The labelled speech clips, in the order long clips repeat them: LibriVox 0870…0930, jfk.wav, ldc93s1.wav. */
function labelledSpeechClips(): { name: string; pcm: Int16Array; reference: string }[] {
  const refs = new Map(
    readFileSync(`${LIBRI}/transcription`, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => {
        const m = /^(.*)\(([^)]+)\)\s*$/.exec(l)!;
        return [m[2]!, m[1]!.replace(/<\/?s>/g, "").trim()] as const;
      }),
  );
  const libri = [...refs.keys()].sort().map((name) => ({ name, pcm: pcm16MonoFromWav(readFileSync(`${LIBRI}/${name}.wav`))!, reference: refs.get(name)! }));
  return [
    ...libri,
    { name: "jfk.wav", pcm: pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!, reference: "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country." },
    { name: "ldc93s1.wav", pcm: pcm16MonoFromWav(readFileSync(fixturePath("ldc93s1.wav")))!, reference: "She had your dark suit in greasy wash water all year." },
  ];
}

/**
 * Real speech at least `seconds` long with its transcript: the labelled clips one after
 * another (repeated as often as needed, whole clips only) with `gapSeconds` of silence
 * between them, as a long recording with pauses would be.
 */
export function labelledSpeech(seconds: number, gapSeconds = 0.4): { pcm: Int16Array; reference: string; seconds: number } {
  const clips = labelledSpeechClips();
  const parts: Int16Array[] = [];
  const refs: string[] = [];
  let samples = 0;
  for (let i = 0; samples < seconds * RATE; i++) {
    const clip = clips[i % clips.length]!;
    if (i > 0) {
      parts.push(new Int16Array(Math.round(gapSeconds * RATE)));
      samples += Math.round(gapSeconds * RATE);
    }
    parts.push(clip.pcm);
    refs.push(clip.reference);
    samples += clip.pcm.length;
  }
  const pcm = new Int16Array(samples);
  let at = 0;
  for (const p of parts) {
    pcm.set(p, at);
    at += p.length;
  }
  return { pcm, reference: refs.join(" "), seconds: samples / RATE };
}
