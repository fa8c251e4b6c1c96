import { describe, expect, it } from "vitest";
import { machineLoadWindow } from "./machine-load";

describe("machineLoadWindow", () => {
  it("given this process spinning for 300 ms, answers at least most of a core busy, and never more than the machine has", () => {
    const w = machineLoadWindow();
    const until = performance.now() + 300;
    let x = 0;
    while (performance.now() < until) x += Math.sqrt(x + 1);
    const busy = w.take();
    expect(x).toBeGreaterThan(0);
    expect(busy).not.toBeNull();
    expect(busy!).toBeGreaterThanOrEqual(0.7);
    expect(busy!).toBeLessThanOrEqual(w.cores + 1e-9);
  });
});
