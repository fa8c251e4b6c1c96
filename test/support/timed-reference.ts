import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { concatPcm } from "./fixtures";
import { fixture, type RtClient } from "./realtime-support";

const T = "conversation.item.input_audio_transcription";

/**
 * A recognizer that hears perfectly, for tests and benches of partials on engines that
 * decode whole clips: jfk.wav's transcript with each word's time (test/fixtures/jfk-words.json,
 * force-aligned once by the embedded engine's aligner, services/jobs/review-acoustic.ts).
 * `hear` answers a clip cut from jfk.wav (found by its samples: the session streams the
 * file unchanged) with the words that lie inside it, timed from the clip's start: a word
 * the clip ends inside is not heard yet.
 */
export interface TimedReference {
  transcript: string;
  words: { word: string; start: number; end: number }[];
  pcm: Int16Array;
  hear(clip: Int16Array): { word: string; start: number; end: number }[];
}

export function jfkTimedReference(options: { twice?: boolean } = {}): TimedReference {
  const once = JSON.parse(readFileSync(resolve(import.meta.dirname, "../fixtures/jfk-words.json"), "utf8")) as { transcript: string; words: { word: string; start: number; end: number }[] };
  const clip = fixture("jfk.wav");
  // `twice`: the speech said again with its polarity flipped (the same to the ear, other
  // samples, so a clip is still found in one place): a 22 s utterance
  const pcm = options.twice ? concatPcm(clip, clip.map((x) => -x)) : clip;
  const seconds = clip.length / 16_000;
  const file = options.twice
    ? { transcript: `${once.transcript} ${once.transcript}`, words: [...once.words, ...once.words.map((w) => ({ ...w, start: w.start + seconds, end: w.end + seconds }))] }
    : once;
  /** Where `clip` starts in jfk.wav (samples), or -1: its first 20 ms matched sample for sample. */
  const locate = (clip: Int16Array): number => {
    const probe = Math.min(clip.length, 320);
    if (probe === 0) return -1;
    outer: for (let o = 0; o + probe <= pcm.length; o++) {
      for (let i = 0; i < probe; i++) if (pcm[o + i] !== clip[i]) continue outer;
      return o;
    }
    return -1;
  };
  return {
    ...file,
    pcm,
    hear(clip) {
      const at = locate(clip);
      if (at < 0) return [];
      const from = at / 16_000;
      const to = (at + clip.length) / 16_000;
      return file.words.filter((w) => w.start >= from - 0.02 && w.end <= to).map((w) => ({ word: w.word, start: Math.max(0, w.start - from), end: w.end - from }));
    },
  };
}

/** 20 ms frames, each sent once its last sample has been spoken (at `speed` × real time); resolves with the wall-clock start. */
export async function speak(c: RtClient, pcm: Int16Array, speed = 1): Promise<number> {
  const t0 = Date.now();
  for (let i = 0; i * 320 < pcm.length; i++) {
    const due = t0 + ((i + 1) * 20) / speed;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const frame = pcm.subarray(i * 320, (i + 1) * 320);
    c.sendAudio(new Uint8Array(frame.buffer, frame.byteOffset, frame.byteLength));
  }
  return t0;
}

/** Per completed item: its deltas, its speech_stopped and its completed, in arrival order (`__t`: when each arrived). */
export function itemsOf(c: RtClient) {
  const byItem = new Map<string, { deltas: any[]; stopped?: any; completed?: any }>();
  for (const e of c.events) {
    if (!e.item_id) continue;
    const it = byItem.get(e.item_id) ?? { deltas: [] };
    byItem.set(e.item_id, it);
    if (e.type === `${T}.delta`) it.deltas.push(e);
    if (e.type === "input_audio_buffer.speech_stopped") it.stopped = e;
    if (e.type === `${T}.completed`) it.completed = e;
  }
  return [...byItem.values()].filter((i) => i.completed);
}
