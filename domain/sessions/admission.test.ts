import { describe, expect, it } from "vitest";
import { decideAdmission, decideShed, type AdmissionThresholds, type PlaneSignals } from "./admission";

const thresholds: AdmissionThresholds = {
  maxLoopDelayMs: 100,
  maxVadLagMs: 150,
  maxDecisionMs: 150,
  maxEngineShare: 0.6,
  maxPlaneShare: 0.5,
  priorSessionCores: { gateway: 0.0006, vad: 0.0004 },
  settleMs: 1000,
  maxSessions: 0,
  shedLagMs: 2000,
  shedAcksMs: 1000,
  shedEveryMs: 1000,
};
const calm: PlaneSignals = {
  gatewayLoopDelayMs: 12,
  vad: { lagMs: 20, loopDelayMs: 11 },
  decisionP95Ms: 60,
  acksOverloadedMs: 0,
  engineSaturatedRetryAfterS: null,
  openSessions: 300,
  admitting: 0,
  admittedRecently: 10,
  refusedRecently: 0,
  sessionCores: { gateway: null, vad: null },
  machineCores: 2,
  machineFree: { cores: 1.8, admittedSince: 0 },
};

/** given(signals).when(thresholds).then(verdict). */
const given = (over: Partial<PlaneSignals>) => ({
  then(expected: { admit: true } | { admit: false; reason: string; retryAfterSeconds: number; cause?: string }, t: Partial<AdmissionThresholds> = {}) {
    const verdict = decideAdmission({ ...calm, ...over }, { ...thresholds, ...t });
    // a refusal names its measured cause; compared when the case states it
    if (!verdict.admit && !("cause" in expected)) expect(verdict.cause.length).toBeGreaterThan(0);
    expect(verdict).toEqual(verdict.admit || "cause" in expected ? expected : { ...expected, cause: verdict.cause });
  },
});

describe("admission: a new session only while the plane keeps up", () => {
  it("given a calm plane, admits", () => given({}).then({ admit: true }));
  it("given no VAD report at all (none running yet), judges on the rest", () => given({ vad: null }).then({ admit: true }));
  it("given the gateway's loop delay over its bound, refuses gateway_busy for 5 s", () =>
    given({ gatewayLoopDelayMs: 101 }).then({ admit: false, reason: "gateway_busy", retryAfterSeconds: 5 }));
  it("given the loop delay at its bound, still admits", () => given({ gatewayLoopDelayMs: 100, vad: { lagMs: 150, loopDelayMs: 100 }, admittedRecently: 0 }).then({ admit: true }));
  it("given a VAD reading the audio late, refuses vad_behind", () =>
    given({ vad: { lagMs: 151, loopDelayMs: 5 } }).then({ admit: false, reason: "vad_behind", retryAfterSeconds: 5 }));
  it("given a VAD whose own loop is slow, refuses vad_behind", () =>
    given({ vad: { lagMs: 10, loopDelayMs: 101 } }).then({ admit: false, reason: "vad_behind", retryAfterSeconds: 5 }));
  it("given the sessions' recent VAD decisions late (p95 over the bound), refuses decisions_late; at the bound, or too few decisions to say, admits", () => {
    given({ decisionP95Ms: 151 }).then({ admit: false, reason: "decisions_late", retryAfterSeconds: 5 });
    given({ decisionP95Ms: 150, admittedRecently: 0 }).then({ admit: true });
    given({ decisionP95Ms: null }).then({ admit: true });
  });
  it("given a streaming engine, admits only while one more speaker (and each admitted lately still open) fits its share of the machine, and never with every decoder held by a speaker", () => {
    const engine = (speakers: number, perSpeaker: number, full = false, load = speakers * perSpeaker) => ({ lagMs: 0, loopDelayMs: 0, engine: { speakers, perSpeaker, load, full } });
    // 2 speakers talking at 0.125 of the machine each: a third and a fourth fit under 0.6, a fifth would not
    given({ admittedRecently: 0, vad: engine(2, 0.125) }).then({ admit: true });
    given({ admittedRecently: 1, vad: engine(2, 0.125) }).then({ admit: true });
    given({ admittedRecently: 2, vad: engine(2, 0.125) }).then({
      admit: false,
      reason: "engine_busy",
      retryAfterSeconds: 5,
      cause: "2 speakers talking, 2 admitted lately and this one at 12.5% of the machine each: 62.5% > 60.0%",
    });
    given({ admittedRecently: 0, vad: engine(5, 0.11) }).then({ admit: false, reason: "engine_busy", retryAfterSeconds: 5 });
    given({ admittedRecently: 0, vad: engine(4, 0.05, true) }).then({ admit: false, reason: "engine_full", retryAfterSeconds: 5, cause: "every streaming decoder is held by a speaker still talking (4)" });
    // exactly at the share: admitted
    given({ admittedRecently: 1, vad: engine(2, 0.125) }).then({ admit: true }, { maxEngineShare: 0.5 });
    // idle engine (no speaker measured yet): nothing to predict from
    given({ admittedRecently: 0, vad: engine(0, 0) }).then({ admit: true });
    // nobody talking: a lone session has the engine to itself, even at a cost over the share (one core of one)
    given({ admittedRecently: 0, openSessions: 0, vad: engine(0, 1) }).then({ admit: true });
  });
  it("given decoders busy finishing committed utterances (load high, no speaker talking), admits: a transient is not a speaker", () => {
    given({ admittedRecently: 0, openSessions: 0, vad: { lagMs: 0, loopDelayMs: 0, engine: { speakers: 0, perSpeaker: 0.3, load: 0.9, full: false } } }).then({ admit: true });
  });
  it("given a session admitted lately that has closed since (no session open), it is no speaker: the next is admitted", () => {
    // the reported case: open_sessions 0, admitted_recently 1, one speaker costing 0.35 of the machine
    given({ admittedRecently: 1, openSessions: 0, vad: { lagMs: 0, loopDelayMs: 0, engine: { speakers: 0, perSpeaker: 0.35, load: 0.5, full: false } } }).then({ admit: true });
    given({ admittedRecently: 1, openSessions: 1, vad: { lagMs: 0, loopDelayMs: 0, engine: { speakers: 0, perSpeaker: 0.35, load: 0.5, full: false } } }).then({ admit: false, reason: "engine_busy", retryAfterSeconds: 5 });
  });
  it("given audio acks over their bound, refuses audio_backlog", () =>
    given({ acksOverloadedMs: 1 }).then({ admit: false, reason: "audio_backlog", retryAfterSeconds: 5 }));
  it("given a cold plane (no cost measured yet), admits a herd at once up to the priors' headroom, and refuses plane_full past it", () => {
    // the priors, 0.0006 + 0.0004 cores a session, within 0.5 of 2 cores: 1,000 sessions
    given({ openSessions: 0, admitting: 999, admittedRecently: 999, machineFree: { cores: 2, admittedSince: 999 } }).then({ admit: true });
    given({ openSessions: 400, admitting: 599, admittedRecently: 999, machineFree: { cores: 2, admittedSince: 999 } }).then({ admit: true });
    given({ openSessions: 0, admitting: 1000, admittedRecently: 1000 }).then({
      admit: false,
      reason: "plane_full",
      // the sessions admitted lately have not shown their cost: the wait is the settle time
      retryAfterSeconds: 1,
      cause: "1000 sessions open or opening and this one at 0.0010 cores each (gateway 0.00060 prior, voice activity detection 0.00040 prior): 1.001 cores > 1.000 cores (50.0% of 2)",
    });
    // the sessions still opening count as much as the open ones
    given({ openSessions: 900, admitting: 100, admittedRecently: 100 }).then({ admit: false, reason: "plane_full", retryAfterSeconds: 1 });
    given({ openSessions: 900, admitting: 99, admittedRecently: 100 }).then({ admit: true });
  });
  it("given the cost per session measured, predicts from the measurement instead of the prior, lower or higher", () => {
    const measured = { gateway: 0.0003, vad: 0.0002 };
    given({ openSessions: 1999, admittedRecently: 0, sessionCores: measured }).then({ admit: true });
    given({ openSessions: 2000, admittedRecently: 0, sessionCores: measured }).then({ admit: false, reason: "plane_full", retryAfterSeconds: 5 });
    given({ openSessions: 499, admittedRecently: 0, sessionCores: { gateway: 0.0012, vad: 0.0008 } }).then({ admit: true });
    given({ openSessions: 500, admittedRecently: 0, sessionCores: { gateway: 0.0012, vad: null } }).then({
      admit: false,
      reason: "plane_full",
      retryAfterSeconds: 5,
      cause: "500 sessions open or opening and this one at 0.0016 cores each (gateway 0.0012 measured, voice activity detection 0.00040 prior): 0.802 cores > 0.800 cores (40.0% of 2)",
    }, { maxPlaneShare: 0.4 });
    // a VAD in the gateway's process costs nothing more than the gateway measured
    given({ openSessions: 1600, admittedRecently: 0, sessionCores: { gateway: 0.0006, vad: 0 } }).then({ admit: true });
    // a bigger machine holds more at the same cost
    given({ openSessions: 3000, admittedRecently: 0 }).then({ admit: false, reason: "plane_full", retryAfterSeconds: 5 });
    given({ openSessions: 3000, admittedRecently: 0, machineCores: 8 }).then({ admit: true });
  });
  it("given the machine's free cores (last read while settled), admits a herd that fits in half of them at once, and past that a step per settle window, refusing machine_busy", () => {
    // 0.6 cores free: 300 sessions at the priors' 0.001 cores each
    const busy = { openSessions: 0, machineFree: { cores: 0.6, admittedSince: 299 } };
    given({ ...busy, admitting: 299, admittedRecently: 299 }).then({ admit: true });
    given({ ...busy, admitting: 300, admittedRecently: 300, machineFree: { cores: 0.6, admittedSince: 300 } }).then({
      admit: false,
      reason: "machine_busy",
      retryAfterSeconds: 1,
      cause: "the machine had 0.600 cores free (measured), 300 sessions admitted since and this one at 0.0010 cores each: 0.301 cores > 50.0% of it; 300 sessions admitted in the last 1000 ms, the step is 10 (2.0% of 0 open, at least 10)",
    });
    // no core free (other work): the step still comes, ten a window here, and the lagging signals judge
    given({ openSessions: 0, admittedRecently: 9, machineFree: { cores: 0, admittedSince: 9 } }).then({ admit: true });
    given({ openSessions: 0, admittedRecently: 10, machineFree: { cores: 0, admittedSince: 10 } }).then({ admit: false, reason: "machine_busy", retryAfterSeconds: 1 });
    given({ openSessions: 500, admittedRecently: 9, machineFree: { cores: 0, admittedSince: 9 } }).then({ admit: true });
    given({ openSessions: 500, admittedRecently: 10, machineFree: { cores: 0, admittedSince: 10 }, refusedRecently: 20 }).then({ admit: false, reason: "machine_busy", retryAfterSeconds: 3 });
    // not read yet (or no /proc): the plane's share alone
    given({ openSessions: 0, admitting: 999, admittedRecently: 999, machineFree: { cores: null, admittedSince: 999 } }).then({ admit: true });
  });
  it("given a full plane, Retry-After spreads the crowd refused lately over windows of a twentieth of what it holds (at most 30 s)", () => {
    const full = { openSessions: 1000, admittedRecently: 0 };
    given({ ...full, refusedRecently: 49 }).then({ admit: false, reason: "plane_full", retryAfterSeconds: 5 });
    given({ ...full, refusedRecently: 50 }).then({ admit: false, reason: "plane_full", retryAfterSeconds: 10 });
    given({ ...full, refusedRecently: 100_000 }).then({ admit: false, reason: "plane_full", retryAfterSeconds: 30 });
    given({ openSessions: 0, admitting: 1000, admittedRecently: 1000, refusedRecently: 949 }).then({ admit: false, reason: "plane_full", retryAfterSeconds: 19 });
  });
  it("given a plane near a lagging bound (over 60% of it), admits a step of 2% of the sessions open (at least 10) per settle window, refusing plane_near_limit past it", () => {
    // 600 open: a step of 12
    given({ openSessions: 600, admittedRecently: 11, decisionP95Ms: 91 }).then({ admit: true });
    given({ openSessions: 600, admittedRecently: 12, decisionP95Ms: 91 }).then({
      admit: false,
      reason: "plane_near_limit",
      retryAfterSeconds: 1,
      cause: "voice activity decisions p95 91 ms, past 60.0% of its bound: 12 sessions admitted in the last 1000 ms, the step is 12 (2.0% of 600 open, at least 10)",
    });
    given({ admittedRecently: 10, decisionP95Ms: 90 }).then({ admit: true });
    // at 60% exactly, not yet near
    given({ admittedRecently: 10, gatewayLoopDelayMs: 60, vad: { lagMs: 90, loopDelayMs: 60 } }).then({ admit: true });
    given({ admittedRecently: 10, gatewayLoopDelayMs: 61 }).then({ admit: false, reason: "plane_near_limit", retryAfterSeconds: 1 });
    given({ admittedRecently: 10, vad: { lagMs: 91, loopDelayMs: 0 } }).then({ admit: false, reason: "plane_near_limit", retryAfterSeconds: 1 });
    given({ admittedRecently: 10, vad: { lagMs: 0, loopDelayMs: 61 } }).then({ admit: false, reason: "plane_near_limit", retryAfterSeconds: 1 });
    // a few sessions open: ten a window
    given({ openSessions: 10, admittedRecently: 9, decisionP95Ms: 140 }).then({ admit: true });
    given({ openSessions: 10, admittedRecently: 10, decisionP95Ms: 140 }).then({ admit: false, reason: "plane_near_limit", retryAfterSeconds: 1 });
    // the crowd refused together waits for the steps ahead of it
    given({ admittedRecently: 10, refusedRecently: 20, decisionP95Ms: 100 }).then({ admit: false, reason: "plane_near_limit", retryAfterSeconds: 3 });
  });
  it("given a session cap, refuses at it and not below; no cap when 0", () => {
    given({ openSessions: 400 }).then({ admit: false, reason: "session_cap", retryAfterSeconds: 5 }, { maxSessions: 400 });
    given({ openSessions: 399 }).then({ admit: true }, { maxSessions: 400 });
    given({ openSessions: 100_000, sessionCores: { gateway: 0.000001, vad: 0 } }).then({ admit: true });
  });
  it("given a saturated engine, refuses engine_saturated with its wait as Retry-After, before any other cause", () =>
    given({ engineSaturatedRetryAfterS: 4.2, gatewayLoopDelayMs: 500 }).then({ admit: false, reason: "engine_saturated", retryAfterSeconds: 5 }));
});

describe("shedding: the newest session, one at a time, only while the plane is far behind", () => {
  const T = 1_800_000_000_000;
  const shed = (over: Partial<PlaneSignals>, lastShedAt: number | null = null, now = T) => decideShed({ ...calm, ...over }, thresholds, now, lastShedAt);

  it("given a plane that is merely over the admission bounds, sheds nothing", () => {
    expect(shed({ gatewayLoopDelayMs: 500, vad: { lagMs: 900, loopDelayMs: 300 }, decisionP95Ms: 900, acksOverloadedMs: 900 })).toBeNull();
  });
  it("given a VAD far behind, sheds vad_behind", () => {
    expect(shed({ vad: { lagMs: 2001, loopDelayMs: 0 } })).toBe("vad_behind");
    expect(shed({ vad: { lagMs: 0, loopDelayMs: 2001 } })).toBe("vad_behind");
  });
  it("given the gateway's loop far behind, sheds gateway_busy", () => expect(shed({ gatewayLoopDelayMs: 2001 })).toBe("gateway_busy"));
  it("given every signal exactly at the shed bound, sheds nothing; with no VAD report, judges on the rest", () => {
    expect(shed({ gatewayLoopDelayMs: 2000, vad: { lagMs: 2000, loopDelayMs: 2000 }, decisionP95Ms: 2000, acksOverloadedMs: 1000 })).toBeNull();
    expect(shed({ vad: null })).toBeNull();
    expect(shed({ vad: null, gatewayLoopDelayMs: 2001 })).toBe("gateway_busy");
  });
  it("given the sessions' decisions far behind, sheds decisions_late", () => {
    expect(shed({ decisionP95Ms: 2001 })).toBe("decisions_late");
    expect(shed({ decisionP95Ms: 2000 })).toBeNull();
  });
  it("given acks over their bound past shedAcksMs, sheds audio_backlog", () => {
    expect(shed({ acksOverloadedMs: 1001 })).toBe("audio_backlog");
    expect(shed({ acksOverloadedMs: 1000 })).toBeNull();
  });
  it("given a shed less than shedEveryMs ago, waits; at shedEveryMs sheds the next", () => {
    expect(shed({ gatewayLoopDelayMs: 3000 }, T - 999)).toBeNull();
    expect(shed({ gatewayLoopDelayMs: 3000 }, T - 1000)).toBe("gateway_busy");
  });
  it("given no open session, sheds nothing", () => expect(shed({ gatewayLoopDelayMs: 3000, openSessions: 0 })).toBeNull());
});
