import { describe, expect, it } from "vitest";
import { BufferPool } from "./buffer-pool";

describe("buffer pool", () => {
  it("hands out whole steps, and a buffer given back goes to the next take within the slack", () => {
    const pool = new BufferPool({ step: 1024, maxBytes: 8192, slack: 1.5 });
    const a = pool.take(3500);
    expect(a.byteLength).toBe(4096);
    pool.give(a);
    expect(pool.spareBytes).toBe(4096);
    expect(pool.take(3073)).toBe(a); // four steps asked: the spare of four
    pool.give(a);
    expect(pool.take(2048)).not.toBe(a); // two steps asked: four is past 1.5×
    expect(pool.take(3072)).toBe(a); // three asked: four is within 1.5×
    expect(pool.spareBytes).toBe(0);
  });

  it("takes back only its own buffers, once each, up to maxBytes", () => {
    const pool = new BufferPool({ step: 1024, maxBytes: 3072 });
    pool.give(new ArrayBuffer(1024)); // not from this pool
    expect(pool.spareBytes).toBe(0);
    const a = pool.take(1024);
    pool.give(a);
    pool.give(a); // twice is once
    expect(pool.spareBytes).toBe(1024);
    const big = pool.take(3000);
    pool.give(big); // 1024 + 3072 would pass maxBytes: left to the collector
    expect(pool.spareBytes).toBe(1024);
    expect(pool.take(3000)).not.toBe(big);
    expect(pool.take(1024)).toBe(a);
    expect(pool.take(1024)).not.toBe(a);
  });
});
