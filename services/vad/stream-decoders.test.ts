import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "../../test/support/fixtures";
import { createStreamDecoderPool, type StreamDecoderPool, type StreamUtterance } from "./stream-decoders";

/** The pool's queue, with the real ps-worker: one decoder, three items asking for it. */
describe("stream decoder pool: items waiting for a decoder", () => {
  let pool: StreamDecoderPool;
  const speech = pcm16MonoFromWav(readFileSync(fixturePath("ldc93s1.wav")))!;
  const options = { prompt: null, cmn: null };
  beforeAll(async () => {
    pool = await createStreamDecoderPool({ size: 1, warm: 1 });
  });
  afterAll(() => pool.close());

  it("a freed decoder goes to the item that has waited longest, and a new item does not jump the queue", async () => {
    const first = pool.acquire(options)!;
    expect(first).not.toBeNull();
    const granted: string[] = [];
    const held: StreamUtterance[] = [];
    pool.wait(options, (u) => (granted.push("second"), held.push(u)));
    const cancelThird = pool.wait(options, (u) => (granted.push("third"), held.push(u)));
    pool.wait(options, (u) => (granted.push("fourth"), held.push(u)));
    cancelThird(); // the third item ended while it waited
    // a decoder is busy and two items wait: an item that asks now queues behind them
    expect(pool.acquire(options)).toBeNull();
    first.feed(speech);
    const result = await first.end();
    expect(result.words.length).toBeGreaterThan(0);
    expect(granted).toEqual(["second"]);
    held[0]!.feed(speech);
    expect((await held[0]!.end()).words.length).toBeGreaterThan(0);
    expect(granted).toEqual(["second", "fourth"]);
    held[1]!.abort();
    await new Promise((r) => setTimeout(r, 200));
    expect(pool.stats()).toMatchObject({ busy: 0, speakers: 0 });
    // nobody waits: the free decoder is taken at once again
    const again = pool.acquire(options);
    expect(again).not.toBeNull();
    again!.abort();
  });
});

/**
 * A streamed item is one PocketSphinx utterance, pauses and all: with its silence
 * removal the decoder counted the words' frames from the utterance's latest return to
 * speech, and JFK's 11 s (three pauses of 0.7–1.2 s) came back with "And" at 8.38 s and
 * the last word at 17.06 s. ps-worker.c places each word in the audio that was fed.
 */
describe("stream decoder pool: the words of an utterance", () => {
  let pool: StreamDecoderPool;
  const jfk = pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!;
  beforeAll(async () => {
    pool = await createStreamDecoderPool({ size: 1, warm: 1 });
  });
  afterAll(() => pool.close());
  /** The words of `pcm` fed in 30 ms frames, checked to lie in its audio in order, the first within its first second. */
  const wordsInOrder = async (pcm: Int16Array) => {
    const u = pool.acquire({ prompt: null, cmn: null })!;
    for (let at = 0; at < pcm.length; at += 480) u.feed(pcm.subarray(at, at + 480));
    const { words } = await u.end();
    expect(words[0]!.start).toBeLessThan(1);
    for (let i = 1; i < words.length; i++) expect(words[i]!.start).toBeGreaterThanOrEqual(words[i - 1]!.start);
    expect(words.at(-1)!.end).toBeLessThanOrEqual(pcm.length / 16_000 + 0.01);
    return words;
  };

  it("the words of jfk.wav fed in 30 ms frames lie in its 11 s, in order, the first within its first second", async () => {
    const words = await wordsInOrder(jfk);
    expect(words.length).toBeGreaterThanOrEqual(15);
    expect(words.at(-1)!.start).toBeGreaterThan(jfk.length / 16_000 - 2);
  });

  // The final pass (bestpath over the first pass's lattice) now and then finds no path:
  // jfk.wav's first 7.0 s (14 of its 100 prefixes cut every 0.1 s) ended with no words,
  // though the running hypothesis held them, and the realtime item kept only the words
  // its deltas had sent, at zero length. ps-worker.c then reports the first pass's words.
  it("jfk.wav's first 7.0 s still end with its words, in order, within the 7 s, without a probability", async () => {
    const words = await wordsInOrder(jfk.subarray(0, 7 * 16_000));
    expect(words.map((w) => w.word).join(" ")).toMatch(/fellow americans/);
    // the first pass's words carry no posterior: none is made up
    expect(words.every((w) => w.probability === undefined)).toBe(true);
  });
});
