import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { decodeAudio } from "../../shared/audio/decode";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { FIXTURES_DIR, fixturePath } from "../../test/support/fixtures";

const LIBRI = "/usr/share/pocketsphinx/test/data/librivox";

/** The labelled clips: Debian's LibriVox test data and the two fixtures, decoded to 16 kHz PCM. */
export async function labelledClips() {
  const lines = (await readFile(`${LIBRI}/transcription`, "utf8")).split("\n").filter(Boolean);
  const clips = lines.map((l) => {
    const m = /^(.*)\(([^)]+)\)\s*$/.exec(l)!;
    return { name: m[2]!, path: `${LIBRI}/${m[2]}.wav`, ref: m[1]!.replace(/<\/?s>/g, "").trim() };
  });
  clips.push({ name: "jfk.wav", path: `${FIXTURES_DIR}/jfk.wav`, ref: "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country." });
  clips.push({ name: "ldc93s1.wav", path: `${FIXTURES_DIR}/ldc93s1.wav`, ref: "She had your dark suit in greasy wash water all year." });
  return Promise.all(clips.map(async (c) => ({ ...c, pcm: (await decodeAudio(await readFile(c.path))).pcm })));
}

/**
 * The looped 16 kHz speech the realtime benches stream: jfk.wav and 1.5 s of silence,
 * or (`librivox`) the five LibriVox clips each followed by 0.8 s of silence. The last
 * silence is lengthened to a whole number of `frameSamples`, so the loop cuts into
 * frames of one size once and a bench sends views of them, never a copy.
 */
export function speechLoop(source: string, frameSamples = 1): Int16Array {
  const pieces: Int16Array[] = [];
  if (source === "librivox") {
    for (const n of ["0870", "0880", "0890", "0920", "0930"]) {
      pieces.push(pcm16MonoFromWav(readFileSync(`${LIBRI}/sense_and_sensibility_01_austen_64kb-${n}.wav`))!, new Int16Array(12_800));
    }
  } else pieces.push(pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!, new Int16Array(24_000));
  const length = pieces.reduce((n, p) => n + p.length, 0);
  // zero-filled: the padding is more silence
  const loop = new Int16Array(Math.ceil(length / frameSamples) * frameSamples);
  let off = 0;
  for (const p of pieces) {
    loop.set(p, off);
    off += p.length;
  }
  return loop;
}
