import { readFile } from "node:fs/promises";
import { decodeAudio } from "../../shared/audio/decode";
import { FIXTURES_DIR } from "../../test/support/fixtures";

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
