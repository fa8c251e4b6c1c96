import { describe, expect, it } from "vitest";
import { createFairSlots, createOwnerShare } from "./fetch-slots";

describe("owner share of a replica's download slots", () => {
  it("lets one owner hold at most half the slots (at least one), and frees on release", () => {
    const share = createOwnerShare(8);
    expect(share.perOwner).toBe(4);
    const a = [1, 2, 3, 4].map(() => share.tryTake("a"));
    expect(a.every(Boolean)).toBe(true);
    expect(share.tryTake("a")).toBeUndefined();
    // another owner is not affected
    expect(share.tryTake("b")).toBeDefined();
    a[0]!();
    a[0]!(); // a second release changes nothing
    expect(share.tryTake("a")).toBeDefined();
    expect(share.tryTake("a")).toBeUndefined();
    expect(createOwnerShare(2).perOwner).toBe(1);
    expect(createOwnerShare(1).perOwner).toBe(1);
  });
});

describe("fair decode slots", () => {
  it("grants a freed slot to the waiting owner with the fewest running, oldest first", async () => {
    const slots = createFairSlots(2);
    const a1 = await slots.acquire("a");
    const a2 = await slots.acquire("a");
    const order: string[] = [];
    const a3 = slots.acquire("a").then((r) => (order.push("a3"), r));
    const b1 = slots.acquire("b").then((r) => (order.push("b1"), r));
    const a4 = slots.acquire("a").then((r) => (order.push("a4"), r));
    a1();
    await b1; // b runs nothing, so it goes before a3 although a3 waited longer
    expect(order).toEqual(["b1"]);
    a2();
    (await a3)();
    (await b1)();
    (await a4)();
    expect(order).toEqual(["b1", "a3", "a4"]);
  });

  it("drops a waiter whose signal aborts", async () => {
    const slots = createFairSlots(1);
    const first = await slots.acquire("a");
    const controller = new AbortController();
    const waiting = slots.acquire("b", controller.signal);
    controller.abort(new Error("cancelled"));
    await expect(waiting).rejects.toThrow("cancelled");
    const next = slots.acquire("c");
    first();
    (await next)();
  });
});
