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
