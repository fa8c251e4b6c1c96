import { describe, expect, it } from "vitest";
import { createSweepBackoff } from "./sweep-backoff";

describe("idle-job sweep backoff", () => {
  it("given a job whose look decided nothing, when swept again, then it waits twice as long each time up to the bound", () => {
    const b = createSweepBackoff(1000, 5000);
    expect(b.due("j", 0)).toBe(true);
    b.looked("j", false, 0);
    expect(b.due("j", 1999)).toBe(false);
    expect(b.due("j", 2000)).toBe(true);
    b.looked("j", false, 2000);
    expect(b.due("j", 5999)).toBe(false);
    expect(b.due("j", 6000)).toBe(true);
    b.looked("j", false, 6000);
    expect(b.due("j", 10_999)).toBe(false); // 8 s capped at 5 s
    expect(b.due("j", 11_000)).toBe(true);
  });

  it("given a waiting job, when a look decides something or the sweep no longer finds it, then it is due at once again", () => {
    const b = createSweepBackoff(1000, 60_000);
    b.looked("a", false, 0);
    b.looked("b", false, 0);
    b.looked("a", true, 0);
    expect(b.due("a", 1)).toBe(true);
    expect(b.due("b", 1)).toBe(false);
    b.keepOnly(["a"]);
    expect(b.due("b", 1)).toBe(true);
    expect(b.due("other", 1)).toBe(true);
  });
});
