import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KV } from "@nats-io/kv";
import { createUtteranceSlots } from "../services/rt-transcriber/utterance-slots";
import { isolatedNats } from "./support/nats";

/**
 * services/rt-transcriber/utterance-slots.ts: maxConcurrentUtterances across
 * rt-transcriber replicas, on the real KV bucket. Each replica remembers the revision it
 * wrote last; these check that the remembered state never decides alone when another
 * replica has written since, and that it does save the read when nobody has.
 */
let nats: Awaited<ReturnType<typeof isolatedNats>>;
let kv: KV;

beforeAll(async () => {
  nats = await isolatedNats();
  kv = await nats.kv("leases");
});

afterAll(async () => {
  await nats?.destroy();
});

/** The bucket, counting the reads made through it. */
function counted(bucket: KV) {
  const reads = { n: 0 };
  const proxy = new Proxy(bucket, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (prop === "get") return (...args: unknown[]) => (reads.n++, (value as (...a: unknown[]) => unknown).apply(target, args));
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { kv: proxy as KV, reads };
}

describe("utterance slots across replicas", () => {
  it("a replica alone takes and frees a session's slots with one write each, no reads", async () => {
    const a = counted(kv);
    const slots = createUtteranceSlots(a.kv, 60_000);
    expect(await slots.tryAcquire("s1", "item_1", 2)).toBe(true); // a new session's entry: created
    expect(await slots.tryAcquire("s1", "item_2", 2)).toBe(true);
    await slots.release("s1", "item_1");
    expect(await slots.tryAcquire("s1", "item_3", 2)).toBe(true);
    await slots.release("s1", "item_2");
    await slots.release("s1", "item_3");
    expect(a.reads.n).toBe(0);
    const entry = await kv.get("utt.s1");
    expect(Object.keys((entry!.json() as { items: object }).items)).toEqual([]);
  });

  it("what another replica wrote meanwhile is read before deciding, both ways", async () => {
    const a = createUtteranceSlots(kv, 60_000);
    const counting = counted(kv);
    const b = createUtteranceSlots(counting.kv, 60_000);
    expect(await a.tryAcquire("s2", "item_1", 1)).toBe(true);
    // b never wrote s2: its create fails on a's entry, which it then reads
    expect(await b.tryAcquire("s2", "item_2", 1)).toBe(false); // full
    expect(counting.reads.n).toBe(1);
    await a.release("s2", "item_1");
    expect(await b.tryAcquire("s2", "item_2", 1)).toBe(true);
    // a last wrote "empty": its write fails on the revision, it reads b's slot and refuses
    expect(await a.tryAcquire("s2", "item_3", 1)).toBe(false);
    // b frees its slot; a last saw "full": it must not refuse on that
    await b.release("s2", "item_2");
    expect(await a.tryAcquire("s2", "item_3", 1)).toBe(true);
    // a slot taken by a, freed through b (a redelivered command on another replica)
    await b.release("s2", "item_3");
    expect(await b.tryAcquire("s2", "item_4", 1)).toBe(true);
    // a's memory still lists item_3: freeing it again changes nothing, and item_4 holds
    await a.release("s2", "item_3");
    expect(await a.tryAcquire("s2", "item_5", 1)).toBe(false);
    const entry = await kv.get("utt.s2");
    expect(Object.keys((entry!.json() as { items: object }).items)).toEqual(["item_4"]);
  });
});
