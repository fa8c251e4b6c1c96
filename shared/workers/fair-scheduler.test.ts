import { describe, expect, it } from "vitest";
import { createFairScheduler, type Grant, type QueuedUtterance } from "./fair-scheduler";

/** A scheduler on a hand-driven clock: timers fire when `advance` passes them. */
function harness(opts: { capacity: number; fallback?: boolean; maxWaitMs?: number }) {
  let t = 1_000;
  let timers: { at: number; fn: () => void; live: boolean }[] = [];
  const s = createFairScheduler({
    capacity: () => opts.capacity,
    fallback: () => opts.fallback ?? false,
    maxWaitMs: opts.maxWaitMs ?? 5000,
    now: () => t,
    setTimer: (fn, ms) => {
      const timer = { at: t + ms, fn, live: true };
      timers.push(timer);
      return { cancel: () => void (timer.live = false) };
    },
  });
  const granted: { u: QueuedUtterance; grant: Grant }[] = [];
  let n = 0;
  const add = (owner: string, sessionId = `${owner}-s`, maxPerSession = 10) => {
    const u: QueuedUtterance = { owner, sessionId, itemId: `i${n++}`, maxPerSession, committedAt: t };
    void s.enqueue(u).then((grant) => granted.push({ u, grant }));
    return u;
  };
  const settle = () => new Promise((r) => setImmediate(r));
  const advance = async (ms: number) => {
    t += ms;
    const due = timers.filter((x) => x.live && x.at <= t);
    timers = timers.filter((x) => !due.includes(x));
    for (const x of due) x.fn();
    await settle();
  };
  return { s, add, granted, settle, advance };
}

describe("fair scheduler", () => {
  it("given one owner's backlog, when a second owner commits, then it is served next, not after the backlog", async () => {
    const h = harness({ capacity: 1 });
    const big = Array.from({ length: 6 }, (_, i) => h.add("big", `big-${i}`));
    const small = h.add("small");
    await h.settle();
    expect(h.granted.map((g) => g.u.itemId)).toEqual([big[0]!.itemId]);
    h.s.release(big[0]!, "local");
    await h.settle();
    expect(h.granted.at(-1)!.u).toBe(small);
    h.s.release(small, "local");
    await h.settle();
    expect(h.granted.at(-1)!.u).toBe(big[1]);
  });

  it("alternates owners while both have work, oldest first within an owner", async () => {
    const h = harness({ capacity: 1 });
    const a = [h.add("a", "a1"), h.add("a", "a2"), h.add("a", "a3")];
    const b = [h.add("b", "b1"), h.add("b", "b2")];
    for (let i = 0; i < 5; i++) {
      await h.settle();
      h.s.release(h.granted.at(-1)!.u, "local");
    }
    await h.settle();
    expect(h.granted.map((g) => g.u)).toEqual([a[0], b[0], a[1], b[1], a[2]]);
  });

  it("keeps a session within maxPerSession and lets other sessions pass it", async () => {
    const h = harness({ capacity: 3 });
    h.add("a", "s1", 1);
    h.add("a", "s1", 1);
    const other = h.add("a", "s2", 1);
    await h.settle();
    expect(h.granted.map((g) => g.u.sessionId)).toEqual(["s1", "s2"]);
    expect(h.granted[1]!.u).toBe(other);
    expect(h.s.stats()).toMatchObject({ queued: 1, localInFlight: 2 });
  });

  it("spills to the fallback when local capacity is full and one is configured", async () => {
    const h = harness({ capacity: 1, fallback: true });
    h.add("a");
    h.add("a");
    await h.settle();
    expect(h.granted.map((g) => g.grant)).toEqual(["local", "fallback"]);
    expect(h.s.stats()).toMatchObject({ queued: 0, localInFlight: 1, fallbackInFlight: 1 });
  });

  it("expires an utterance that waited maxWaitMs from its commit, and reports saturation", async () => {
    const h = harness({ capacity: 1, maxWaitMs: 1000 });
    const first = h.add("a");
    const waiting = h.add("b");
    await h.advance(499);
    expect(h.s.stats()).toMatchObject({ queued: 1, oldestWaitMs: 499, saturated: false });
    await h.advance(1);
    expect(h.s.stats().saturated).toBe(true);
    await h.advance(500);
    expect(h.granted.find((g) => g.u === waiting)?.grant).toBe("expired");
    expect(h.s.stats()).toMatchObject({ queued: 0, expired: 1, saturated: true });
    // a late release of the expired one changes nothing; the engine slot is the first's
    h.s.release(waiting, "expired");
    h.s.release(first, "local");
    expect(h.s.stats().localInFlight).toBe(0);
    await h.advance(2000);
    expect(h.s.stats().saturated).toBe(false);
  });

  it("hands queued utterances back as stopped on close", async () => {
    const h = harness({ capacity: 0 });
    h.add("a");
    h.s.close();
    await h.settle();
    expect(h.granted.map((g) => g.grant)).toEqual(["stopped"]);
    expect(h.s.stats().queued).toBe(0);
  });
});
