import { describe, expect, it } from "vitest";
import { correctedCapacity, decideAdmission, decideShed, type AdmissionThresholds, type PlaneSignals } from "./admission";

const thresholds: AdmissionThresholds = {
  maxLoopDelayMs: 100,
  maxVadLagMs: 150,
  maxDecisionMs: 150,
  maxEngineShare: 0.6,
  burst: 50,
  maxMachineShare: 0.75,
  plannedSessions: 400,
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
  admittedRecently: 10,
  refusedRecently: 0,
  inFlight: 0,
  closedRecently: 0,
  // past the prediction: the burst decides (the herd's cases set it)
  predictedSessions: 0,
  machine: null,
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
  it("given a burst of admissions not yet measured, refuses admission_burst for the settle time", () => {
    given({ admittedRecently: 50 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 });
    given({ admittedRecently: 49 }).then({ admit: true });
    given({ admittedRecently: 100 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 3 }, { burst: 100, settleMs: 2500 });
  });
  it("given room under the predicted sessions, admits a herd at once whatever the burst; past it, the burst per window", () => {
    given({ openSessions: 0, admittedRecently: 0, predictedSessions: 400 }).then({ admit: true });
    given({ openSessions: 399, admittedRecently: 399, predictedSessions: 400 }).then({ admit: true });
    // upgrades admitted and not open yet count as open
    given({ openSessions: 200, inFlight: 199, admittedRecently: 399, predictedSessions: 400 }).then({ admit: true });
    given({ openSessions: 200, inFlight: 200, admittedRecently: 400, predictedSessions: 400, refusedRecently: 599 }).then({
      admit: false,
      reason: "admission_burst",
      // the crowd refused after it waits its turn at the burst: 600 at 50 a window
      retryAfterSeconds: 12,
      cause: "400 sessions open (400 predicted to hold at the targets), 400 admitted in the last 1000 ms, the burst past the prediction is 50",
    });
    // sessions from before this window under the prediction: admitted whatever came lately
    given({ openSessions: 300, admittedRecently: 60, predictedSessions: 400 }).then({ admit: true });
    // past it, sessions admitted long ago leave room for the burst
    given({ openSessions: 460, admittedRecently: 49, predictedSessions: 400 }).then({ admit: true });
    given({ openSessions: 460, admittedRecently: 50, predictedSessions: 400 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 });
    // near a bound no herd is admitted at once, whatever the prediction: a fifth of the burst
    given({ openSessions: 10, admittedRecently: 10, decisionP95Ms: 100, predictedSessions: 400 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 });
    // a load refusal comes first
    given({ openSessions: 10, predictedSessions: 400, gatewayLoopDelayMs: 101 }).then({ admit: false, reason: "gateway_busy", retryAfterSeconds: 5 });
  });
  it("corrects the prediction from what the plane showed: down to what is open near a bound, up to what it held with no signal near one", () => {
    const near = { ...calm, decisionP95Ms: 91 };
    expect(correctedCapacity(500, { ...near, openSessions: 320 }, thresholds)).toBe(320);
    // near a bound with fewer open than predicted, and more: never raised there
    expect(correctedCapacity(300, { ...near, openSessions: 320 }, thresholds)).toBe(300);
    // calm: what it held before this window is shown
    expect(correctedCapacity(500, { ...calm, openSessions: 640, admittedRecently: 40 }, thresholds)).toBe(600);
    // calm with fewer open than predicted: the prediction stands
    expect(correctedCapacity(500, { ...calm, openSessions: 100, admittedRecently: 0 }, thresholds)).toBe(500);
    // the sessions just admitted are not shown yet
    expect(correctedCapacity(500, { ...calm, openSessions: 540, admittedRecently: 50 }, thresholds)).toBe(500);
  });

  it("given a handful of sessions, a signal near its bound does not lower the prediction: one late decision at one session is not what the plane holds", () => {
    expect(correctedCapacity(650, { ...calm, openSessions: 1, admittedRecently: 0, gatewayLoopDelayMs: 70 }, thresholds)).toBe(650);
    expect(correctedCapacity(650, { ...calm, openSessions: 9, admittedRecently: 0, vad: { lagMs: 0, loopDelayMs: 90 } }, thresholds)).toBe(650);
    expect(correctedCapacity(650, { ...calm, openSessions: 10, admittedRecently: 0, vad: { lagMs: 0, loopDelayMs: 90 } }, thresholds)).toBe(10);
  });

  it("given the machine's busy cores, predicts the sessions that fill its share of them", () => {
    // 200 sessions shown keep 1.2 of 2 cores busy: 0.75 × 2 cores fit 250
    const costly = { ...calm, openSessions: 210, admittedRecently: 10, machine: { busyCores: 1.2, cores: 2 } };
    expect(correctedCapacity(650, costly, thresholds)).toBe(250);
    // past the share the plane is near its limit: down to what is open, and none past it
    const full = { ...costly, machine: { busyCores: 1.6, cores: 2 } };
    expect(correctedCapacity(650, full, thresholds)).toBe(210);
    expect(decideAdmission({ ...full, predictedSessions: 650, admittedRecently: 10 }, thresholds)).toMatchObject({ admit: false, reason: "plane_full" });
    // the prediction measured: none past it (no burst), refused plane_full naming the machine's figures
    expect(decideAdmission({ ...costly, predictedSessions: 250, openSessions: 250 }, thresholds)).toEqual({
      admit: false,
      reason: "plane_full",
      retryAfterSeconds: 5,
      cause: "250 sessions open, 250 predicted to fill 75.0% of the machine's 2 cores (1.20 busy)",
    });
    expect(decideAdmission({ ...costly, predictedSessions: 250, openSessions: 249 }, thresholds)).toEqual({ admit: true });
    // a cheaper machine than the prior's: up, at most to twice the sessions shown at a step
    const cheap = { ...calm, openSessions: 150, admittedRecently: 0, machine: { busyCores: 0.3, cores: 2 } };
    expect(correctedCapacity(400, cheap, thresholds)).toBe(400);
    expect(correctedCapacity(150, cheap, { ...thresholds, plannedSessions: 150 })).toBe(300);
    expect(correctedCapacity(150, { ...cheap, openSessions: 400, machine: { busyCores: 0.8, cores: 2 } }, { ...thresholds, plannedSessions: 150 })).toBe(750);
  });

  it("given a crowd refused together for load, spreads their Retry-After over the windows after 5 s, a burst's worth a window (at most 30 s)", () => {
    given({ openSessions: 10, gatewayLoopDelayMs: 101, refusedRecently: 49 }).then({ admit: false, reason: "gateway_busy", retryAfterSeconds: 5 });
    given({ openSessions: 10, gatewayLoopDelayMs: 101, refusedRecently: 120 }).then({ admit: false, reason: "gateway_busy", retryAfterSeconds: 7 });
    given({ openSessions: 10, gatewayLoopDelayMs: 101, refusedRecently: 5000 }).then({ admit: false, reason: "gateway_busy", retryAfterSeconds: 30 });
  });

  it("given too few sessions to show their cost, the machine's load holds nothing back: a herd's own upgrades or the service starting are not the sessions' load", () => {
    const starting = { ...calm, openSessions: 9, admittedRecently: 0, machine: { busyCores: 1.9, cores: 2 } };
    expect(correctedCapacity(650, starting, thresholds)).toBe(650);
    expect(decideAdmission({ ...starting, predictedSessions: 650 }, thresholds)).toEqual({ admit: true });
    // … and past the prediction the burst, as before
    expect(decideAdmission({ ...starting, predictedSessions: 0 }, thresholds)).toEqual({ admit: true });
    // a herd just admitted is not shown yet either
    expect(decideAdmission({ ...starting, openSessions: 600, admittedRecently: 600, predictedSessions: 650 }, thresholds)).toEqual({ admit: true });
  });

  it("given a plane near a bound (over 60% of it), admits a fifth of the burst per settle window", () => {
    given({ admittedRecently: 9, decisionP95Ms: 91 }).then({ admit: true });
    given({ admittedRecently: 10, decisionP95Ms: 91 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 });
    given({ admittedRecently: 10, decisionP95Ms: 90 }).then({ admit: true });
    // at 60% exactly, not yet near
    given({ admittedRecently: 10, gatewayLoopDelayMs: 60, vad: { lagMs: 90, loopDelayMs: 60 } }).then({ admit: true });
    given({ admittedRecently: 10, gatewayLoopDelayMs: 61 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 });
    given({ admittedRecently: 10, vad: { lagMs: 91, loopDelayMs: 0 } }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 });
    given({ admittedRecently: 10, vad: { lagMs: 0, loopDelayMs: 61 } }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 });
    given({ admittedRecently: 0, decisionP95Ms: 140 }).then({ admit: true }, { burst: 3 });
    given({ admittedRecently: 1, decisionP95Ms: 140 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 }, { burst: 3 });
  });
  it("given many refused for the burst lately, Retry-After spreads them over the windows it takes to admit them (at most 30 s)", () => {
    given({ admittedRecently: 50, refusedRecently: 49 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 1 });
    given({ admittedRecently: 50, refusedRecently: 50 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 2 });
    given({ admittedRecently: 50, refusedRecently: 949 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 19 });
    given({ admittedRecently: 50, refusedRecently: 100_000 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 30 });
    // near a bound the burst is a fifth: the same crowd waits longer
    given({ admittedRecently: 10, refusedRecently: 50, decisionP95Ms: 100 }).then({ admit: false, reason: "admission_burst", retryAfterSeconds: 6 });
  });
  it("given a session cap, refuses at it and not below; no cap when 0", () => {
    given({ openSessions: 400 }).then({ admit: false, reason: "session_cap", retryAfterSeconds: 5 }, { maxSessions: 400 });
    given({ openSessions: 399 }).then({ admit: true }, { maxSessions: 400 });
    given({ openSessions: 100_000 }).then({ admit: true });
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
  it("given many sessions closing together (load leaving), sheds nothing; a few closing does not stop it", () => {
    // the measured case: 500 of a herd closed at once, 200 still open, a VAD 1.1 s behind
    expect(shed({ vad: { lagMs: 1125, loopDelayMs: 131 }, decisionP95Ms: 1166, openSessions: 200, closedRecently: 500 })).toBeNull();
    expect(shed({ vad: { lagMs: 2500, loopDelayMs: 0 }, openSessions: 200, closedRecently: 51 })).toBeNull();
    expect(shed({ vad: { lagMs: 2500, loopDelayMs: 0 }, openSessions: 200, closedRecently: 50 })).toBe("vad_behind");
    expect(shed({ vad: { lagMs: 2500, loopDelayMs: 0 }, openSessions: 300, closedRecently: 10 })).toBe("vad_behind");
  });
});
