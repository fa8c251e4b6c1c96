import { describe, expect, it } from "vitest";
import { CLOSE } from "../../schemas/realtime";
import { upstreamCloseReason } from "./session";

describe("upstreamCloseReason: one NATS outage, one close", () => {
  it("while NATS is down every upstream trouble is upstream_unavailable", () => {
    for (const cause of ["backpressure", "publish_failed", "publish_refused"] as const) expect(upstreamCloseReason(cause, false), cause).toBe(CLOSE.upstreamUnavailable);
  });

  it("with NATS up each cause keeps its own reason", () => {
    expect(upstreamCloseReason("backpressure", true)).toBe(CLOSE.upstreamBackpressure);
    expect(upstreamCloseReason("publish_failed", true)).toBe(CLOSE.upstreamUnavailable);
    expect(upstreamCloseReason("publish_refused", true)).toBe(CLOSE.clientError);
  });
});
