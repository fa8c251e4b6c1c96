import { describe, expect, it } from "vitest";
import { createEntryBatcher } from "./lease-entry";

/**
 * createEntryBatcher with an in-memory compare-and-set store (the real one is NATS KV,
 * exercised by test/realtime-revocation.test.ts): how changes are grouped into writes
 * and what each caller gets back.
 */
function memoryStore(initial: number, conflicts = 0) {
  let value = initial;
  let conflictsLeft = conflicts;
  const writes: number[] = [];
  const write = async (_key: string, change: (n: number) => number | null) => {
    for (;;) {
      const seen = value;
      await new Promise((r) => setImmediate(r));
      const next = change(seen);
      if (next === null) return null;
      if (conflictsLeft > 0) {
        // another writer got there first: the batch runs again on the new value
        conflictsLeft--;
        value += 100;
        continue;
      }
      value = next;
      writes.push(next);
      return next;
    }
  };
  return { write, writes, value: () => value };
}

describe("createEntryBatcher", () => {
  it("200 concurrent changes of one entry cost two writes, each caller sees its own result", async () => {
    const store = memoryStore(0);
    const change = createEntryBatcher<number>(store.write);
    const results = await Promise.all(Array.from({ length: 200 }, () => change("k", (n) => n + 1)));
    expect(store.value()).toBe(200);
    expect(store.writes.length).toBe(2);
    expect([...results].sort((a, b) => a! - b!)).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
  });

  it("a change that throws refuses only its caller; null leaves the state; a conflict re-runs the whole batch", async () => {
    const store = memoryStore(0, 1);
    const change = createEntryBatcher<number>(store.write);
    const limit = 103;
    const capped = (n: number) => {
      if (n >= limit) throw new Error("full");
      return n + 1;
    };
    const outcomes = await Promise.allSettled([change("k", capped), change("k", capped), change("k", () => null), change("k", capped), change("k", capped), change("k", capped)]);
    // first batch: [capped] hits a conflict (value becomes 100) and runs again: 101
    // second batch: 102, 103, null, refused, refused
    expect(outcomes.map((o) => (o.status === "fulfilled" ? o.value : (o.reason as Error).message))).toEqual([101, 102, null, 103, "full", "full"]);
    expect(store.value()).toBe(103);
  });

  it("a failed write fails every caller of its batch, and the next batch still runs", async () => {
    let fail = true;
    const change = createEntryBatcher<number>(async (_key, c) => {
      await new Promise((r) => setImmediate(r));
      if (fail) {
        fail = false;
        throw new Error("nats down");
      }
      return c(0);
    });
    const first = change("k", (n) => n + 1);
    const second = change("k", (n) => n + 2);
    await expect(first).rejects.toThrow("nats down");
    expect(await second).toBe(2);
  });
});
