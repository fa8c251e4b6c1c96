import { describe, expect, it } from "vitest";
import { CLOSE, type CloseReason } from "../../schemas/realtime";
import { closeFor, decideClose, NATS_OUTAGE_CLOSE_MS, OUTCOME_GRACE_MS, upstreamAvailable, upstreamCloseReason, type SessionCheck, type SessionLimits } from "./close-rules";

const limits: SessionLimits = {
  maxFrameBytes: 1024 * 1024,
  maxAudioSecondsPerSession: 3600,
  maxSessionSeconds: 7200,
  idleTimeoutSeconds: 30,
  maxClientBufferBytes: 4 * 1024 * 1024,
  backpressureGraceMs: 2000,
};

/** given(limits).when(check).then(the close reason, or "keep" / "drop_frame"). */
function given(overrides: Partial<SessionLimits> = {}) {
  return {
    when: (check: SessionCheck) => ({
      then(expected: CloseReason | "keep" | "drop_frame") {
        const verdict = decideClose(check, { ...limits, ...overrides });
        expect(verdict).toEqual(typeof expected === "string" ? { kind: expected } : { kind: "close", reason: expected });
      },
    }),
  };
}

const T0 = 1_800_000_000_000;
const swept = (over: Partial<Extract<SessionCheck, { kind: "swept" }>> = {}): SessionCheck => ({
  kind: "swept",
  now: T0 + 10_000,
  startedAt: T0,
  lastAudioAt: T0 + 9_000,
  gracefulDeadline: null,
  upstreamAvailable: true,
  upstreamLostAt: null,
  pendingItems: 0,
  bufferedBytes: 0,
  overloadedMs: 0,
  natsHealthy: true,
  ...over,
});
const audio = (audioMs: number, over: { allowanceMs?: number; budgetExhausted?: boolean } = {}) => ({ audioMs, allowanceMs: 5_000, budgetExhausted: false, ...over });

describe("frames", () => {
  it("a frame of exactly RT_MAX_FRAME_BYTES is read; one byte more closes 1009 frame_too_large, text or binary", () => {
    given().when({ kind: "frame_received", binary: true, bytes: 1024 * 1024, bytesPerFrame: 2 }).then("keep");
    given().when({ kind: "frame_received", binary: true, bytes: 1024 * 1024 + 2, bytesPerFrame: 2 }).then(CLOSE.frameTooLarge);
    given().when({ kind: "frame_received", binary: false, bytes: 1024 * 1024 + 1, bytesPerFrame: 2 }).then(CLOSE.frameTooLarge);
    given({ maxFrameBytes: 100 }).when({ kind: "frame_received", binary: false, bytes: 101, bytesPerFrame: 2 }).then(CLOSE.frameTooLarge);
  });

  it("a binary frame cut inside a sample is dropped, not closed; a text frame of any length is read", () => {
    given().when({ kind: "frame_received", binary: true, bytes: 3, bytesPerFrame: 2 }).then("drop_frame");
    given().when({ kind: "frame_received", binary: true, bytes: 6, bytesPerFrame: 4 }).then("drop_frame");
    given().when({ kind: "frame_received", binary: true, bytes: 8, bytesPerFrame: 4 }).then("keep");
    given().when({ kind: "frame_received", binary: false, bytes: 3, bytesPerFrame: 2 }).then("keep");
  });

  it("too large wins over cut inside a sample", () => {
    given({ maxFrameBytes: 10 }).when({ kind: "frame_received", binary: true, bytes: 11, bytesPerFrame: 2 }).then(CLOSE.frameTooLarge);
  });
});

describe("audio limits and the key's budget", () => {
  it("the session's audio past max_audio_seconds_per_session closes 1008 session_audio_limit (at the limit it goes on)", () => {
    given({ maxAudioSecondsPerSession: 60 }).when({ kind: "audio_counted", ...audio(60_000, { allowanceMs: 70_000 }) }).then("keep");
    given({ maxAudioSecondsPerSession: 60 }).when({ kind: "audio_counted", ...audio(60_001, { allowanceMs: 70_000 }) }).then(CLOSE.sessionAudioLimit);
  });

  it("a used-up budget closes 1008 audio_quota_exhausted once the audio passes what was granted", () => {
    given().when({ kind: "audio_counted", ...audio(5_000, { budgetExhausted: true }) }).then("keep");
    given().when({ kind: "audio_counted", ...audio(5_001, { budgetExhausted: true }) }).then(CLOSE.audioQuotaExhausted);
    // a budget not used up is topped up ahead of the audio, not closed on
    given().when({ kind: "audio_counted", ...audio(5_001) }).then("keep");
  });

  it("the session's own limit is checked before the key's budget", () => {
    given({ maxAudioSecondsPerSession: 1 }).when({ kind: "audio_counted", ...audio(5_001, { budgetExhausted: true }) }).then(CLOSE.sessionAudioLimit);
  });

  it("a settled claim closes only on the budget", () => {
    given().when({ kind: "budget_settled", ...audio(5_001, { budgetExhausted: true }) }).then(CLOSE.audioQuotaExhausted);
    given().when({ kind: "budget_settled", ...audio(5_000, { budgetExhausted: true }) }).then("keep");
    given({ maxAudioSecondsPerSession: 1 }).when({ kind: "budget_settled", ...audio(5_001) }).then("keep");
  });

  it("a session opened with nothing left in the key's window closes 1008 audio_quota_exhausted", () => {
    given().when({ kind: "opened", remainingAudioSeconds: 0 }).then(CLOSE.audioQuotaExhausted);
    given().when({ kind: "opened", remainingAudioSeconds: -3 }).then(CLOSE.audioQuotaExhausted);
    given().when({ kind: "opened", remainingAudioSeconds: 0.5 }).then("keep");
  });
});

describe("upstream and client backpressure", () => {
  it("a partition over its acks in flight longer than the grace closes 1013 upstream_unavailable while NATS is down, and nothing while it is up (the gateway sheds its newest session instead)", () => {
    given().when({ kind: "audio_published", overloadedMs: 2000, natsHealthy: false }).then("keep");
    given().when({ kind: "audio_published", overloadedMs: 2001, natsHealthy: false }).then(CLOSE.upstreamUnavailable);
    given().when({ kind: "audio_published", overloadedMs: 60_000, natsHealthy: true }).then("keep");
  });

  it("a failed batch closes 1013 upstream_unavailable; refused by the stream, 1011 client_error unless NATS is down", () => {
    given().when({ kind: "publish_failed", refused: false, natsHealthy: true }).then(CLOSE.upstreamUnavailable);
    given().when({ kind: "publish_failed", refused: true, natsHealthy: true }).then(CLOSE.clientError);
    given().when({ kind: "publish_failed", refused: true, natsHealthy: false }).then(CLOSE.upstreamUnavailable);
    given().when({ kind: "publish_failed", refused: false, natsHealthy: false }).then(CLOSE.upstreamUnavailable);
  });

  it("a client that does not read: a dropped send or more unsent than the bound closes 1013 client_backpressure", () => {
    given().when({ kind: "event_sent", result: 1, bufferedBytes: 0 }).then("keep");
    given().when({ kind: "event_sent", result: 0, bufferedBytes: 4 * 1024 * 1024 }).then("keep");
    given().when({ kind: "event_sent", result: 0, bufferedBytes: 4 * 1024 * 1024 + 1 }).then(CLOSE.clientBackpressure);
    given().when({ kind: "event_sent", result: 2, bufferedBytes: 0 }).then(CLOSE.clientBackpressure);
  });
});

describe("events that close at once", () => {
  it("a revoked key closes 1008 key_revoked, a stopping gateway 1013 upstream_unavailable, a handler that threw 1011 client_error", () => {
    expect(closeFor("key_revoked")).toBe(CLOSE.keyRevoked);
    expect(closeFor("gateway_stopping")).toBe(CLOSE.upstreamUnavailable);
    expect(closeFor("handler_failed")).toBe(CLOSE.clientError);
    expect(closeFor("load_shed")).toBe(CLOSE.upstreamBackpressure);
  });
});

describe("graceful close (session.close)", () => {
  it("closes 1000 once the VAD has flushed and every committed item has its result", () => {
    given().when({ kind: "event_forwarded", closeRequested: true, vadFlushed: true, pendingItems: 0 }).then(CLOSE.normal);
    given().when({ kind: "event_forwarded", closeRequested: true, vadFlushed: false, pendingItems: 0 }).then("keep");
    given().when({ kind: "event_forwarded", closeRequested: true, vadFlushed: true, pendingItems: 1 }).then("keep");
    given().when({ kind: "event_forwarded", closeRequested: false, vadFlushed: true, pendingItems: 0 }).then("keep");
  });

  it("or at its deadline; while it waits no other rule of the sweep closes", () => {
    given().when(swept({ gracefulDeadline: T0 + 10_001, upstreamAvailable: false, lastAudioAt: T0 - 60_000, bufferedBytes: 1e9, overloadedMs: 1e9 })).then("keep");
    given().when(swept({ gracefulDeadline: T0 + 10_000 })).then(CLOSE.normal);
    given().when(swept({ gracefulDeadline: T0 + 9_000 })).then(CLOSE.normal);
  });
});

describe("the sweep", () => {
  it("a healthy, speaking session goes on", () => {
    given().when(swept()).then("keep");
  });

  it("upstream unavailable (breaker open, NATS down too long) closes 1013 upstream_unavailable before any limit", () => {
    given({ maxSessionSeconds: 1 }).when(swept({ upstreamAvailable: false })).then(CLOSE.upstreamUnavailable);
  });

  it("with upstream gone and committed items still owed their outcome, the session waits up to OUTCOME_GRACE_MS, then closes 1013 all the same", () => {
    const lost = T0 + 10_000 - OUTCOME_GRACE_MS;
    given().when(swept({ upstreamAvailable: false, upstreamLostAt: lost + 1, pendingItems: 1 })).then("keep");
    given().when(swept({ upstreamAvailable: false, upstreamLostAt: lost, pendingItems: 1 })).then(CLOSE.upstreamUnavailable);
    given().when(swept({ upstreamAvailable: false, upstreamLostAt: lost + 1, pendingItems: 0 })).then(CLOSE.upstreamUnavailable);
    given().when(swept({ upstreamAvailable: false, upstreamLostAt: null, pendingItems: 3 })).then(CLOSE.upstreamUnavailable);
  });

  it("open longer than max_session_seconds closes 1008 session_duration_limit (at the limit it goes on)", () => {
    given({ maxSessionSeconds: 10 }).when(swept({ now: T0 + 10_000 })).then("keep");
    given({ maxSessionSeconds: 10 }).when(swept({ now: T0 + 10_001, lastAudioAt: T0 + 10_000 })).then(CLOSE.sessionDurationLimit);
  });

  it("no audio for idle_timeout_seconds closes 4408 idle_timeout (at the limit it goes on)", () => {
    given({ idleTimeoutSeconds: 5 }).when(swept({ lastAudioAt: T0 + 5_000 })).then("keep");
    given({ idleTimeoutSeconds: 5 }).when(swept({ lastAudioAt: T0 + 4_999 })).then(CLOSE.idleTimeout);
  });

  it("the duration limit is checked before idleness", () => {
    given({ maxSessionSeconds: 1, idleTimeoutSeconds: 1 }).when(swept({ lastAudioAt: T0 })).then(CLOSE.sessionDurationLimit);
  });

  it("a client that does not read closes 1013 client_backpressure; a slow upstream closes only while NATS is down", () => {
    given().when(swept({ bufferedBytes: 4 * 1024 * 1024 })).then("keep");
    given().when(swept({ bufferedBytes: 4 * 1024 * 1024 + 1, overloadedMs: 5000 })).then(CLOSE.clientBackpressure);
    given().when(swept({ overloadedMs: 60_000 })).then("keep");
    given().when(swept({ overloadedMs: 2000, natsHealthy: false })).then("keep");
    given().when(swept({ overloadedMs: 2001, natsHealthy: false })).then(CLOSE.upstreamUnavailable);
  });
});

describe("upstreamCloseReason: one NATS outage, one close", () => {
  it("while NATS is down every upstream trouble is upstream_unavailable", () => {
    for (const cause of ["publish_failed", "publish_refused"] as const) expect(upstreamCloseReason(cause, false), cause).toBe(CLOSE.upstreamUnavailable);
  });

  it("with NATS up each cause keeps its own reason", () => {
    expect(upstreamCloseReason("publish_failed", true)).toBe(CLOSE.upstreamUnavailable);
    expect(upstreamCloseReason("publish_refused", true)).toBe(CLOSE.clientError);
  });
});

describe("upstreamAvailable: what the sweep tells every session", () => {
  it("a NATS outage shorter than NATS_OUTAGE_CLOSE_MS is ridden out; from then on sessions close", () => {
    expect(upstreamAvailable(null, null)).toBe(true);
    expect(upstreamAvailable(NATS_OUTAGE_CLOSE_MS - 1, null)).toBe(true);
    expect(upstreamAvailable(NATS_OUTAGE_CLOSE_MS, null)).toBe(false);
    expect(upstreamAvailable(NATS_OUTAGE_CLOSE_MS, { available: true, retryAfterSeconds: 0 })).toBe(false);
  });

  it("an open breaker ends sessions; a registry briefly without a warm worker (breaker closed) does not", () => {
    expect(upstreamAvailable(null, { available: false, retryAfterSeconds: 3 })).toBe(false);
    expect(upstreamAvailable(null, { available: false, retryAfterSeconds: 0 })).toBe(true);
    expect(upstreamAvailable(null, { available: true, retryAfterSeconds: 0 })).toBe(true);
  });
});
