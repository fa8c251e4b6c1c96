import { readFileSync } from "node:fs";
import { loadVadEngine } from "../../shared/audio/vad";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "../../test/support/fixtures";

/**
 * A conversation for the end-of-turn bench (bench/end-of-turn.ts): real recorded speech
 * with its natural pauses, cut into turns by a punctuated reference written down from
 * the known texts.
 *
 * The LibriVox clips are consecutive segments of one reading of Sense and Sensibility,
 * chapter 1 (ids 0870, 0880, 0890 and 0920, 0930 follow one another; 0900 and 0910 are
 * not in the test data), each file keeping its side of the pause it was cut at. Played
 * back to back, two consecutive clips give back the reader's own pause between them. The
 * book's punctuation says where the sentence goes on:
 *
 *   "… and Mr. John Dashwood had then leisure to consider how much there might prudently
 *   be in his power to do for them. | He was not an ill-disposed young man, | unless to
 *   be rather cold hearted and rather selfish is to be ill-disposed: [0900, 0910] | Had
 *   he married a more amiable woman, he might have been made still more respectable than
 *   he was:— | he might even have been made amiable himself; …"
 *
 * A turn is what the speaker says before yielding; the speaker yields (TURN_GAP_S of
 * silence: the other side's turn) after "for them." (a sentence end), after
 * "ill-disposed:" and after "amiable himself;" (the recording goes on with clips the
 * test data lacks, so the speaker stops there). Inside a turn, every pause is
 * mid-sentence: the comma after "young man", the colon and dash after "than he was", and
 * the two commas inside jfk.wav ("And so, my fellow Americans, ask not what your country
 * can do for you, ask what you can do for your country."). ldc93s1.wav is one sentence.
 * A commit inside a turn cuts a sentence that had not ended.
 */
export interface Turn {
  name: string;
  /** The punctuated reference (what the speaker says in this turn). */
  text: string;
  pcm: Int16Array;
  /** End of speech: the end of the last 30 ms frame the WebRTC VAD (mode 3) calls voiced, in samples from the turn's start. */
  speechEnd: number;
  /** Pauses inside the turn (≥ 150 ms between voiced frames): [from, to) in samples. */
  pauses: [number, number][];
}

const LIBRI = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-";
const clip = (name: string) => pcm16MonoFromWav(readFileSync(name.includes(".wav") ? fixturePath(name) : `${LIBRI}${name}.wav`))!;

/** Silence after each turn: longer than the longest wait (low eagerness, 2 s), so every turn ends before the next. */
export const TURN_GAP_S = 2.5;

const SCRIPT: { name: string; clips: string[]; text: string }[] = [
  { name: "0870", clips: ["0870"], text: "And Mr. John Dashwood had then leisure to consider how much there might prudently be in his power to do for them." },
  { name: "0880+0890", clips: ["0880", "0890"], text: "He was not an ill-disposed young man, unless to be rather cold hearted and rather selfish is to be ill-disposed:" },
  { name: "0920+0930", clips: ["0920", "0930"], text: "Had he married a more amiable woman, he might have been made still more respectable than he was:— he might even have been made amiable himself;" },
  { name: "jfk", clips: ["jfk.wav"], text: "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country." },
  { name: "ldc93s1", clips: ["ldc93s1.wav"], text: "She had your dark suit in greasy wash water all year." },
];

/** The turns, with their end of speech and inner pauses as the WebRTC VAD hears them. */
export async function conversationTurns(): Promise<Turn[]> {
  const vad = await loadVadEngine();
  return SCRIPT.map((t) => {
    const parts = t.clips.map(clip);
    const pcm = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
    parts.reduce((at, p) => (pcm.set(p, at), at + p.length), 0);
    return { name: t.name, text: t.text, pcm, ...voicedStretches(vad, pcm) };
  });
}

/** Where speech ends in `pcm` and its pauses of 150 ms and more, as the WebRTC VAD (mode 3) hears them (samples). */
export function voicedStretches(vad: Awaited<ReturnType<typeof loadVadEngine>>, pcm: Int16Array): { speechEnd: number; pauses: [number, number][] } {
  // one silent frame ends a stretch of speech here (30 ms), no padding: the voiced stretches themselves
  const seg = vad.createSegmenter({ threshold: 0.6, prefix_padding_ms: 0, silence_duration_ms: 150, aggressiveness: 3, max_utterance_ms: 30000 });
  const events = [...seg.push(pcm), ...seg.push(new Int16Array(16000))];
  seg.close();
  const stretches = events.flatMap((e) => (e.kind === "utterance" ? [[e.audioStartMs * 16, e.audioEndMs * 16 - 150 * 16] as [number, number]] : []));
  const pauses = stretches.slice(1).map((s, i): [number, number] => [stretches[i]![1], s[0]]);
  return { speechEnd: stretches.at(-1)![1], pauses };
}
