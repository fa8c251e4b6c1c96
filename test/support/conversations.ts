import { readFileSync } from "node:fs";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "./fixtures";

/**
 * Conversations of real people from the test data (bench/diarization.ts, and
 * test/diarize-long.test.ts's long recording): seven speakers, each a recording or a few
 * of one person (docs/diarization.md "Measured"): jfk.wav, ldc93s1.wav (a TIMIT
 * speaker), silero_test.wav, and Debian pocketsphinx-testdata's LibriVox reader, cards
 * speaker, numbers.raw and a TIDIGITS speaker.
 */
const RATE = 16_000;
const DATA = "/usr/share/pocketsphinx/test/data";

const wav = (path: string) => pcm16MonoFromWav(readFileSync(path))!;
/** A headerless 16 kHz PCM16LE recording of the test data. */
function raw(path: string): Int16Array {
  const b = readFileSync(`${DATA}/${path}`);
  return new Int16Array(b.buffer, b.byteOffset, Math.floor(b.byteLength / 2)).slice();
}

export interface TestSpeaker {
  name: string;
  clips: Int16Array[];
}

/** The seven speakers, in the bench's order (its random choices index this list). */
export function testSpeakers(): TestSpeaker[] {
  return [
    { name: "jfk", clips: [wav(fixturePath("jfk.wav"))] },
    { name: "timit", clips: [wav(fixturePath("ldc93s1.wav"))] },
    { name: "silero", clips: [wav(fixturePath("silero_test.wav"))] },
    { name: "librivox", clips: ["0870", "0880", "0890", "0920", "0930"].map((n) => wav(`${DATA}/librivox/sense_and_sensibility_01_austen_64kb-${n}.wav`)) },
    { name: "cards", clips: [1, 2, 3, 4, 5].map((n) => wav(`${DATA}/cards/00${n}.wav`)) },
    { name: "numbers", clips: [raw("numbers.raw")] },
    { name: "tidigits", clips: [raw("tidigits/dhd.2934z.raw")] },
  ];
}

/** A speaker's recordings end to end (0.2 s apart), to be read round and round. */
export function speakerMaterial(clips: Int16Array[]): Int16Array {
  const gap = 0.2 * RATE;
  const out = new Int16Array(clips.reduce((a, c) => a + c.length + gap, 0));
  let at = 0;
  for (const c of clips) {
    out.set(c, at);
    at += c.length + gap;
  }
  return out;
}

/** mulberry32: the same numbers for the same seed, so a conversation is built the same way every run. */
export function seededRandom(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A turn of a built conversation: who (a TestSpeaker name) and when, in seconds. */
export interface ConversationTurn {
  speaker: string;
  start: number;
  end: number;
}

/**
 * A long recording of `voices` (TestSpeaker names) taking turns, as bench/diarization.ts
 * builds its conversations: turns of 2–15 s, each voice reading on through its material
 * from where it stopped (round and round: the test data holds 3 s to 60 s of each), every
 * voice first within the first turns and never twice running, 0.1–0.8 s between turns,
 * over a faint noise floor; until it is `minutes` long. Deterministic for a `seed`.
 */
export function longConversation(voices: string[], minutes: number, seed: number): { pcm: Int16Array; turns: ConversationTurn[] } {
  const speakers = testSpeakers();
  const material = voices.map((v) => speakerMaterial(speakers.find((s) => s.name === v)!.clips));
  const rand = seededRandom(seed);
  const read = material.map(() => 0);
  const pieces: { pcm: Int16Array; gap: number; speaker: string }[] = [];
  let samples = 0;
  let last = -1;
  for (let t = 0; samples < minutes * 60 * RATE; t++) {
    let k = t < voices.length ? t : Math.floor(rand() * voices.length);
    if (k === last) k = (k + 1) % voices.length;
    last = k;
    const m = material[k]!;
    const length = Math.min(Math.round((2 + rand() * 13) * RATE), m.length);
    const pcm = new Int16Array(length);
    for (let i = 0; i < length; i++) pcm[i] = m[(read[k]! + i) % m.length]!;
    read[k] = (read[k]! + length) % m.length;
    const gap = Math.round((0.1 + rand() * 0.7) * RATE);
    pieces.push({ pcm, gap, speaker: voices[k]! });
    samples += length + gap;
  }
  const pcm = new Int16Array(samples);
  const turns: ConversationTurn[] = [];
  let at = 0;
  for (const p of pieces) {
    pcm.set(p.pcm, at);
    turns.push({ speaker: p.speaker, start: at / RATE, end: (at + p.pcm.length) / RATE });
    at += p.pcm.length + p.gap;
  }
  for (let i = 0; i < pcm.length; i++) pcm[i] = Math.max(-32768, Math.min(32767, pcm[i]! + Math.round((rand() - 0.5) * 40)));
  return { pcm, turns };
}
