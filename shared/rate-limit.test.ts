import { describe, expect, it } from "vitest";
import { rateBlockSize, rateHeaders } from "./rate-limit";

// The counter itself is NATS compare-and-set: test/rate-limit.test.ts runs it against a
// real server. These are the pure rules beside it.
describe("rate limit rules", () => {
  it("headers: OpenAI's names (reset as a duration) and the X-RateLimit trio, from the same state", () => {
    expect(rateHeaders({ limit: 60, remaining: 7, resetSeconds: 12 })).toEqual({
      "x-ratelimit-limit-requests": "60",
      "x-ratelimit-remaining-requests": "7",
      "x-ratelimit-reset-requests": "12s",
      "X-RateLimit-Limit": "60",
      "X-RateLimit-Remaining": "7",
      "X-RateLimit-Reset": "12",
    });
  });

  it("a process takes a block of 5% of the limit, at least 1 and at most 100", () => {
    expect(rateBlockSize(1)).toBe(1);
    expect(rateBlockSize(39)).toBe(1);
    expect(rateBlockSize(40)).toBe(2);
    expect(rateBlockSize(59)).toBe(2);
    expect(rateBlockSize(100)).toBe(5);
    expect(rateBlockSize(2000)).toBe(100);
    expect(rateBlockSize(2019)).toBe(100);
    expect(rateBlockSize(100_000)).toBe(100);
  });
});
