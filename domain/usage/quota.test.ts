import { describe, expect, it } from "vitest";
import {
  afterRelease,
  billingWindow,
  blockGrant,
  budgetBlockSeconds,
  budgetCounterKey,
  claimGrant,
  isUnlimited,
  parseCounter,
  round3,
  secondsLeft,
  wholeSecondsLeft,
  windowStart,
} from "./quota";

describe("billing windows", () => {
  it("are fixed and UTC-aligned", () => {
    expect(windowStart(new Date("2026-03-04T23:59:59.999Z"), 86_400).toISOString()).toBe("2026-03-04T00:00:00.000Z");
    expect(windowStart(new Date("2026-03-05T00:00:00.000Z"), 86_400).toISOString()).toBe("2026-03-05T00:00:00.000Z");
    expect(windowStart(new Date("2026-03-04T10:07:30.000Z"), 300).toISOString()).toBe("2026-03-04T10:05:00.000Z");
  });

  it("end where the next starts", () => {
    const w = billingWindow(new Date("2026-03-04T10:07:30.000Z"), 3600);
    expect({ start: w.start.toISOString(), end: w.end.toISOString(), seconds: w.seconds }).toEqual({
      start: "2026-03-04T10:00:00.000Z",
      end: "2026-03-04T11:00:00.000Z",
      seconds: 3600,
    });
  });

  it("name their budget counter by key and start", () => {
    expect(budgetCounterKey("key_1", new Date("2026-03-04T00:00:00.000Z"))).toBe("key_1.1772582400");
  });
});

describe("what is left", () => {
  it("to the millisecond, never negative", () => {
    expect(secondsLeft(3600, 11.0006)).toBe(3588.999);
    expect(secondsLeft(3600, 3600)).toBe(0);
    expect(secondsLeft(3600, 3700)).toBe(0);
  });

  it("in whole seconds, rounded down, never negative", () => {
    expect(wholeSecondsLeft(3600, 18)).toBe(3582);
    expect(wholeSecondsLeft(3600, 17.2)).toBe(3582);
    expect(wholeSecondsLeft(3600, 3601)).toBe(0);
  });

  it("a window limit of 0 is no window budget", () => {
    expect(isUnlimited(0)).toBe(true);
    expect(isUnlimited(1)).toBe(false);
  });

  it("rounds to the millisecond", () => {
    expect(round3(1.0005)).toBe(1.001);
    expect(round3(2.0004)).toBe(2);
  });
});

describe("claims on the live budget", () => {
  it("all or nothing", () => {
    expect(claimGrant(10, 10, false)).toBe(10);
    expect(claimGrant(10, 4, false)).toBe(4);
    expect(claimGrant(9.999, 10, false)).toBe(0);
  });

  it("partial: whatever is left, never negative", () => {
    expect(claimGrant(3, 10, true)).toBe(3);
    expect(claimGrant(12, 10, true)).toBe(10);
    expect(claimGrant(-2, 10, true)).toBe(0);
  });

  it("a block is the need plus what is left of the extra", () => {
    expect(blockGrant(100, 10, 36)).toBe(46);
    expect(blockGrant(20, 10, 36)).toBe(20);
    expect(blockGrant(10, 10, 36)).toBe(10);
    expect(blockGrant(9, 10, 36)).toBe(0);
    expect(blockGrant(5, 0, 36)).toBe(5);
  });

  it("the extra block is 1% of the window, at most 300 s", () => {
    expect(budgetBlockSeconds(3600)).toBe(36);
    expect(budgetBlockSeconds(30_000)).toBe(300);
    expect(budgetBlockSeconds(86_400)).toBe(300);
  });

  it("a release never takes the counter below 0", () => {
    expect(afterRelease(10, 4)).toBe(6);
    expect(afterRelease(3, 4)).toBe(0);
  });
});

describe("stored counters", () => {
  it("read a finite number ≥ 0, anything else as absent", () => {
    expect(parseCounter("12.5")).toBe(12.5);
    expect(parseCounter("0")).toBe(0);
    expect(parseCounter("")).toBeUndefined();
    expect(parseCounter("-1")).toBeUndefined();
    expect(parseCounter("NaN")).toBeUndefined();
    expect(parseCounter("Infinity")).toBeUndefined();
    expect(parseCounter("x")).toBeUndefined();
  });
});
