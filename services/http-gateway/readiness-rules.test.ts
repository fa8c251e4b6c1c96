import { describe, expect, it } from "vitest";
import { judgeProjectionLag, judgeSegmentPlane } from "./readiness-rules";

const now = 1_000_000;
const lag = { now, maxLagMs: 15_000 };

describe("projection lag", () => {
  it("is ok when caught up", () => {
    expect(judgeProjectionLag({ ...lag, applied: 40, head: 40, policy: "bounded" })).toEqual({ ok: true, detail: "caught up at seq 40" });
  });

  it("is ok one event behind for a moment (the probe racing the projector is not a failure)", () => {
    const c = judgeProjectionLag({ ...lag, applied: 40, head: 41, oldestUnappliedAt: now - 30, policy: "bounded" });
    expect(c.ok).toBe(true);
    expect(c.detail).toMatch(/applied seq 40 of 41 \(at most 1 event\), oldest unapplied event 0\.0 s old/);
  });

  it("fails a bounded read model whose oldest unapplied event waited past the bound, however few events", () => {
    expect(judgeProjectionLag({ ...lag, applied: 40, head: 41, oldestUnappliedAt: now - 15_001, policy: "bounded" }).ok).toBe(false);
    expect(judgeProjectionLag({ ...lag, applied: 40, head: 41, oldestUnappliedAt: now - 15_000, policy: "bounded" }).ok).toBe(true);
  });

  it("keeps a bounded read model many events behind ok while it keeps up in time", () => {
    expect(judgeProjectionLag({ ...lag, applied: 10, head: 4010, oldestUnappliedAt: now - 2000, policy: "bounded" }).ok).toBe(true);
  });

  it("never fails an informational read model and says how far behind it is", () => {
    const c = judgeProjectionLag({ ...lag, applied: 100, head: 4100, oldestUnappliedAt: now - 150_000, policy: "informational" });
    expect(c).toEqual({ ok: true, detail: "behind: applied seq 100 of 4100 (at most 4000 events), oldest unapplied event 150.0 s old; informational, never fails readiness" });
  });

  it("does not count a clock skew as negative age", () => {
    expect(judgeProjectionLag({ ...lag, applied: 1, head: 2, oldestUnappliedAt: now + 5000, policy: "bounded" }).detail).toMatch(/0\.0 s old/);
  });
});

describe("segment plane", () => {
  const facts = { natsOk: true, warmWorkers: ["ps-1"], leftOut: [], hasFallback: false };

  it("is ok with a warm worker, naming it", () => {
    expect(judgeSegmentPlane(facts)).toEqual({ ok: true, detail: "1 warm worker (ps-1)" });
  });

  it("is not ok while NATS is not ready, whatever the workers", () => {
    expect(judgeSegmentPlane({ ...facts, natsOk: false, hasFallback: true }).ok).toBe(false);
  });

  it("is not ok without a warm worker or a fallback, and names the workers left out", () => {
    const c = judgeSegmentPlane({ ...facts, warmWorkers: [], leftOut: ["ps-2"] });
    expect(c.ok).toBe(false);
    expect(c.detail).toMatch(/left out until they answer again: ps-2/);
  });

  it("is ok on the fallback alone", () => {
    expect(judgeSegmentPlane({ ...facts, warmWorkers: [], hasFallback: true }).ok).toBe(true);
  });
});
