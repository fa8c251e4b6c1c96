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
 *
 * The second group, `commands`, is every other labelled recording of real speech the
 * test data holds: PocketSphinx's test utterances, each spoken alone (a turn each, as a
 * voice agent's user says a command, a card or a number and waits): cards 001–005,
 * goforward, numbers (a phone number) and a TIDIGITS string. A commit inside one of them
 * would cut it as well (the VAD hears no pause of 150 ms or more inside any of them).
 * something.raw is left out: the test data has no transcript for it.
 */
export interface Turn {
  name: string;
  /** `reading`: the book, jfk.wav and ldc93s1.wav (the bench's first conversation); `commands`: PocketSphinx's test utterances. */
  group: TurnGroup;
  /** The punctuated reference (what the speaker says in this turn). */
  text: string;
  pcm: Int16Array;
  /** End of speech: the end of the last 30 ms frame the WebRTC VAD (mode 3) calls voiced, in samples from the turn's start. */
  speechEnd: number;
  /** Pauses inside the turn (≥ 150 ms between voiced frames): [from, to) in samples. */
  pauses: [number, number][];
}

type TurnGroup = "reading" | "commands";

/** PocketSphinx's test data (Debian's pocketsphinx-testdata). */
export const POCKETSPHINX_DATA = "/usr/share/pocketsphinx/test/data";
const LIBRI = `${POCKETSPHINX_DATA}/librivox/sense_and_sensibility_01_austen_64kb-`;

/** A headerless 16 kHz PCM16LE recording of the test data (`numbers.raw`). */
export function pocketsphinxRaw(path: string): Int16Array {
  const b = readFileSync(`${POCKETSPHINX_DATA}/${path}`);
  return new Int16Array(b.buffer, b.byteOffset, Math.floor(b.byteLength / 2)).slice();
}

/** A clip by name: a fixture (`jfk.wav`), a LibriVox id (`0870`) or a path in the test data. */
function clip(name: string): Int16Array {
  if (name.endsWith(".raw")) return pocketsphinxRaw(name);
  if (name.includes("/")) return pcm16MonoFromWav(readFileSync(`${POCKETSPHINX_DATA}/${name}`))!;
  return pcm16MonoFromWav(readFileSync(name.includes(".wav") ? fixturePath(name) : `${LIBRI}${name}.wav`))!;
}

/** Silence after each turn: longer than the longest wait (low eagerness, 2 s), so every turn ends before the next. */
export const TURN_GAP_S = 2.5;

const SCRIPT: { name: string; group: TurnGroup; clips: string[]; text: string }[] = [
  { name: "0870", group: "reading", clips: ["0870"], text: "And Mr. John Dashwood had then leisure to consider how much there might prudently be in his power to do for them." },
  { name: "0880+0890", group: "reading", clips: ["0880", "0890"], text: "He was not an ill-disposed young man, unless to be rather cold hearted and rather selfish is to be ill-disposed:" },
  { name: "0920+0930", group: "reading", clips: ["0920", "0930"], text: "Had he married a more amiable woman, he might have been made still more respectable than he was:— he might even have been made amiable himself;" },
  { name: "jfk", group: "reading", clips: ["jfk.wav"], text: "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country." },
  { name: "ldc93s1", group: "reading", clips: ["ldc93s1.wav"], text: "She had your dark suit in greasy wash water all year." },
  // cards/cards.transcription; goforward's words are PocketSphinx's own test's; numbers and tidigits as bench/support/number-cases.ts has them
  { name: "cards 001", group: "commands", clips: ["cards/001.wav"], text: "Ten of clubs." },
  { name: "cards 002", group: "commands", clips: ["cards/002.wav"], text: "Four, queen of clubs." },
  { name: "cards 003", group: "commands", clips: ["cards/003.wav"], text: "Seven of clubs." },
  { name: "cards 004", group: "commands", clips: ["cards/004.wav"], text: "Five, five." },
  { name: "cards 005", group: "commands", clips: ["cards/005.wav"], text: "Eight of spades, four of clubs, seven of hearts." },
  { name: "goforward", group: "commands", clips: ["goforward.raw"], text: "Go forward ten meters." },
  { name: "numbers", group: "commands", clips: ["numbers.raw"], text: "Three three four, six nine eight two." },
  { name: "tidigits", group: "commands", clips: ["tidigits/dhd.2934z.raw"], text: "Two nine three four zero." },
];

/** The turns, with their end of speech and inner pauses as the WebRTC VAD hears them. */
export async function conversationTurns(): Promise<Turn[]> {
  const vad = await loadVadEngine();
  return SCRIPT.map((t) => {
    const parts = t.clips.map(clip);
    const pcm = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
    parts.reduce((at, p) => (pcm.set(p, at), at + p.length), 0);
    return { name: t.name, group: t.group, text: t.text, pcm, ...voicedStretches(vad, pcm) };
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
