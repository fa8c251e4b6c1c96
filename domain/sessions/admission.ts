/**
 * Whether a gateway takes one more realtime session, and when it must give one back:
 * pure decisions on the plane's measured load (services/realtime-gateway/headroom.ts
 * gathers the signals; docs/realtime-reference.md, "Admission and shedding"). No clock, no
 * socket, no NATS in here.
 *
 * The rule users of a real-time service expect: sessions already admitted keep their
 * latency, and the ones the plane cannot serve are refused at the door (HTTP 503 with
 * Retry-After, before `session.created`). So admission stops well before the plane is
 * behind, on leading signals (event-loop delay, the VAD's lag behind the audio, audio
 * acks piling up) and on the figure users feel (the VAD decision latency the gateway
 * measures for its sessions). Sessions whose load cannot have shown in those signals
 * yet are admitted by predicted cost: up to the sessions the plane is predicted to hold
 * at its targets (`predictedSessions`: a prior per core, corrected from what the signals
 * showed and from what the sessions open cost the machine, `correctedCapacity`), a herd at once; past the prediction at most `burst` per
 * `settleMs`, so the signals can show each step before the next.
 *
 * Shedding is the safety net for load that grows after admission (sessions that start
 * talking at once, a replica lost): while the plane is far behind it gives back the
 * newest session, one per `shedEveryMs`, never all of them.
 */
export interface PlaneSignals {
  /** The gateway process's event-loop delay, p99 over the last window (ms). */
  gatewayLoopDelayMs: number;
  /**
   * The worst fresh VAD report: how far behind the audio it reads, and its own loop delay
   * (ms); its streaming engine (null without one): the speakers still talking (open
   * utterances, not decodes finishing committed ones), the share of its machine one
   * speaker costs, the share its decoders used lately (logged, not decided on: it
   * includes those transient decodes), and whether every decoder is held by a speaker.
   * null when no VAD report is fresh.
   */
  vad: { lagMs: number; loopDelayMs: number; engine?: { speakers: number; perSpeaker: number; load: number; full: boolean } | null } | null;
  /**
   * The VAD decision latency of this gateway's sessions as it measures it (speech_stopped
   * sent − the deciding audio due, the figure users feel), p95 over the recent
   * decisions; null when too few were made lately to say.
   */
  decisionP95Ms: number | null;
  /** How long the gateway's audio batches in flight have been over RT_MAX_PENDING_ACKS on its worst partition (0: under). */
  acksOverloadedMs: number;
  /** A fresh rt-transcriber report says utterances are waiting past their limit (its max wait, s), or null. */
  engineSaturatedRetryAfterS: number | null;
  /** Sessions open on this gateway. */
  openSessions: number;
  /** Sessions this gateway admitted within the last `settleMs`. */
  admittedRecently: number;
  /** Sessions admitted and not open yet (their upgrade is still being completed): they count as open. */
  inFlight: number;
  /** How many sessions this gateway's plane is predicted to hold at its targets (correctedCapacity). */
  predictedSessions: number;
  /** Sessions that closed on this gateway within the last few seconds (CLOSES_WINDOW_MS in headroom.ts). */
  closedRecently: number;
  /** Upgrades this gateway refused within the last `settleMs`, for any reason (they come back after their Retry-After). */
  refusedRecently: number;
  /**
   * The gateway machine's CPU, every process on it counted: cores busy lately (null
   * until measured).
   */
  machine: { busyCores: number; cores: number } | null;
}

export interface AdmissionThresholds {
  /** Refuse while the gateway's loop delay p99 is over this (ms). */
  maxLoopDelayMs: number;
  /** Refuse while a VAD reads the audio later than this after it was stored, or its loop delay is over maxLoopDelayMs (ms). */
  maxVadLagMs: number;
  /** Refuse while the recent VAD decisions' p95 is over this (ms). */
  maxDecisionMs: number;
  /** Refuse unless the streaming engine can take one more speaker (and the burst's) within this share of its machine's cores. */
  maxEngineShare: number;
  /** Past the predicted sessions, at most this many admissions per settleMs. */
  burst: number;
  /** The share of the machine's cores the sessions are predicted to fill at most (correctedCapacity); past it the plane is near its limit. 0: not measured (machine null). */
  maxMachineShare: number;
  /**
   * The prediction before anything is measured: how many sessions the plane holds at its
   * targets (RT_ADMIT_SESSIONS_PER_CORE × the gateway machine's cores). A crowd arriving
   * at an idle plane is admitted at once up to it.
   */
  plannedSessions: number;
  settleMs: number;
  /** Hard cap on a gateway's open sessions (0: none). */
  maxSessions: number;
  /** Shed while the VAD lag or a loop delay is over this (ms) … */
  shedLagMs: number;
  /** … or the acks have been over their bound this long (ms); one session per shedEveryMs. */
  shedAcksMs: number;
  shedEveryMs: number;
}

export type RefusalReason = "engine_saturated" | "session_cap" | "gateway_busy" | "vad_behind" | "decisions_late" | "engine_full" | "engine_busy" | "audio_backlog" | "admission_burst" | "plane_full";

/** A refusal names its reason (the metric label) and the measured cause (for the refusal's message and the log). */
export type AdmissionVerdict = { admit: true } | { admit: false; reason: RefusalReason; retryAfterSeconds: number; cause: string };

/** Retry-After for a refusal on load: long enough for the plane to show the sessions it just took. */
const LOAD_RETRY_S = 5;
/** The longest Retry-After a burst refusal asks for. */
const MAX_BURST_RETRY_S = 30;

const ms = (v: number) => `${Math.round(v)} ms`;
const share = (v: number) => `${(v * 100).toFixed(1)}%`;

export function decideAdmission(s: PlaneSignals, t: AdmissionThresholds): AdmissionVerdict {
  const refuse = (reason: RefusalReason, retryAfterSeconds: number, cause: string): AdmissionVerdict => ({ admit: false, reason, retryAfterSeconds: Math.max(1, Math.ceil(retryAfterSeconds)), cause });
  // A crowd refused together for load is spread over the windows after LOAD_RETRY_S, a
  // burst's worth a window, not sent back all in one moment: 850 clients refused at once
  // and all retrying 5 s later made a herd every 5 s whose upgrades alone put the VAD
  // behind (decisions p99 +736 ms over 150 sessions that hold +185 ms without it).
  const loadRetryS = queuedRetryS(s, t, LOAD_RETRY_S, t.burst);
  if (s.engineSaturatedRetryAfterS !== null) return refuse("engine_saturated", s.engineSaturatedRetryAfterS, `utterances wait for an engine past ${s.engineSaturatedRetryAfterS} s`);
  if (t.maxSessions > 0 && s.openSessions >= t.maxSessions) return refuse("session_cap", loadRetryS, `${s.openSessions} sessions open, the cap is ${t.maxSessions}`);
  if (s.gatewayLoopDelayMs > t.maxLoopDelayMs) return refuse("gateway_busy", loadRetryS, `gateway event-loop delay ${ms(s.gatewayLoopDelayMs)} > ${ms(t.maxLoopDelayMs)}`);
  if (s.vad && s.vad.lagMs > t.maxVadLagMs) return refuse("vad_behind", loadRetryS, `voice activity detection reads the audio ${ms(s.vad.lagMs)} late > ${ms(t.maxVadLagMs)}`);
  if (s.vad && s.vad.loopDelayMs > t.maxLoopDelayMs) return refuse("vad_behind", loadRetryS, `voice activity detection's event-loop delay ${ms(s.vad.loopDelayMs)} > ${ms(t.maxLoopDelayMs)}`);
  if (s.decisionP95Ms !== null && s.decisionP95Ms > t.maxDecisionMs) return refuse("decisions_late", loadRetryS, `voice activity decisions p95 ${ms(s.decisionP95Ms)} > ${ms(t.maxDecisionMs)}`);
  const engine = s.vad?.engine;
  if (engine) {
    // Counted: the speakers still talking, this one, and those admitted lately that are
    // still open (a session admitted and closed since talks no more; what its last
    // utterance still costs while it is decoded is a transient, not a speaker).
    const admittedOpen = Math.min(s.admittedRecently, s.openSessions);
    const predicted = engine.perSpeaker * (engine.speakers + 1 + admittedOpen);
    if (engine.full) return refuse("engine_full", loadRetryS, `every streaming decoder is held by a speaker still talking (${engine.speakers})`);
    // with nobody talking the new session has the engine to itself, whatever one costs
    if (engine.speakers + admittedOpen > 0 && predicted > t.maxEngineShare) {
      const who = `${engine.speakers} speaker${engine.speakers === 1 ? "" : "s"} talking${admittedOpen > 0 ? `, ${admittedOpen} admitted lately` : ""} and this one`;
      return refuse("engine_busy", loadRetryS, `${who} at ${share(engine.perSpeaker)} of the machine each: ${share(predicted)} > ${share(t.maxEngineShare)}`);
    }
  }
  if (s.acksOverloadedMs > 0) return refuse("audio_backlog", loadRetryS, `audio batches over their acks bound for ${ms(s.acksOverloadedMs)}`);
  // within the predicted headroom a herd is admitted at once: its cost is known ahead
  if (!nearLimit(s, t) && s.openSessions + s.inFlight < s.predictedSessions) return { admit: true };
  // the prediction is the machine's measured cost (correctedCapacity): no burst past it,
  // which on a machine with a costlier session than the prior's put 250 on a plane that
  // held 150 (the prediction rises as the sessions open show room)
  if (measured(s)) {
    const m = s.machine!;
    return refuse("plane_full", loadRetryS, `${s.openSessions + s.inFlight} sessions open, ${s.predictedSessions} predicted to fill ${share(t.maxMachineShare)} of the machine's ${m.cores} cores (${m.busyCores.toFixed(2)} busy)`);
  }
  const burst = burstNow(s, t);
  // Retry-After spreads the ones refused together over the windows it takes to admit
  // them at this pace (a queue's honest wait), not all back in one settle time
  if (s.admittedRecently >= burst) {
    const cause = `${s.openSessions + s.inFlight} sessions open (${s.predictedSessions} predicted to hold at the targets), ${s.admittedRecently} admitted in the last ${ms(t.settleMs)}, the burst past the prediction is ${burst}`;
    return refuse("admission_burst", queuedRetryS(s, t, t.settleMs / 1000, burst), cause);
  }
  return { admit: true };
}

/** A refusal's Retry-After as a queue's place: `baseS`, and a settle window for each `perWindow` refused lately before it (at most MAX_BURST_RETRY_S). */
function queuedRetryS(s: PlaneSignals, t: AdmissionThresholds, baseS: number, perWindow: number): number {
  return Math.min(MAX_BURST_RETRY_S, baseS + (t.settleMs / 1000) * Math.floor(s.refusedRecently / perWindow));
}

/**
 * Past this share of a bound the plane is near its limit: no herd is admitted at once,
 * and a fifth of the burst per settle window. Latency turns sharply at the knee
 * (measured on 2 cores, the decisions' p95 stayed 110–125 ms from 250 to 480 sessions and
 * grew without bound at 650), and the signals lag a second or two.
 */
const NEAR_LIMIT = 0.6;

function nearLimit(s: PlaneSignals, t: AdmissionThresholds): boolean {
  return (
    (measured(s) && s.machine!.busyCores > t.maxMachineShare * s.machine!.cores) ||
    s.gatewayLoopDelayMs > NEAR_LIMIT * t.maxLoopDelayMs ||
    (s.vad !== null && (s.vad.lagMs > NEAR_LIMIT * t.maxVadLagMs || s.vad.loopDelayMs > NEAR_LIMIT * t.maxLoopDelayMs)) ||
    (s.decisionP95Ms !== null && s.decisionP95Ms > NEAR_LIMIT * t.maxDecisionMs)
  );
}

/** Past the prediction, the burst per settle window; near the limit a fifth, so the last sessions before it are added slowly enough for the signals to show each step. */
function burstNow(s: PlaneSignals, t: AdmissionThresholds): number {
  return nearLimit(s, t) ? Math.max(1, Math.floor(t.burst / 5)) : t.burst;
}

/**
 * Sessions the prediction is corrected from, at least: a handful cannot show what the
 * plane holds (one late decision or one collection pause at one session put a signal
 * near its bound; the prediction fell to 1 and a herd after it met the burst alone).
 */
const MIN_SHOWN = 10;

/**
 * Whether the prediction is the machine's measured cost: enough sessions shown on a
 * measured machine. Before that the machine's load is not the sessions' (a herd's own
 * upgrades, the service starting) and does not hold a herd back.
 */
function measured(s: PlaneSignals): boolean {
  return s.machine !== null && s.openSessions - s.admittedRecently >= MIN_SHOWN;
}

/**
 * The prediction corrected from what the plane showed (each time the signals are
 * sampled), from the sessions open before the last settle window (`shown`: those admitted
 * since may not show yet):
 * - near a bound, the plane holds no more than it has open: the prediction falls to that;
 * - otherwise, from what the machine is busy with per session shown: as many as fill
 *   `maxMachineShare` of its cores, extrapolated to at most twice the sessions shown. The
 *   prior per core is one machine's; this is the one the plane runs on (measured: the same
 *   sessions cost one 2-core machine 3.4 times what they cost another). Everything the
 *   machine does counts as the sessions' (the service's own idle work, nats-server,
 *   other processes): no idle baseline to get wrong (one taken while the service started
 *   put 1.3 of 2 cores down as idle and the prediction fell to 10). It errs low on a
 *   small load and converges as sessions are added: it rises while the machine is under
 *   its share and falls past it.
 * - with too few sessions shown, or the machine not measured, the prediction stands, or
 *   rises to what the plane has shown it holds.
 */
export function correctedCapacity(predicted: number, s: PlaneSignals, t: AdmissionThresholds): number {
  const shown = s.openSessions - s.admittedRecently;
  if (shown < MIN_SHOWN) return predicted;
  if (nearLimit(s, t)) return Math.min(predicted, s.openSessions);
  const m = s.machine;
  if (m && m.busyCores > 0) {
    const fits = Math.floor((shown * t.maxMachineShare * m.cores) / m.busyCores);
    return Math.max(shown, Math.min(fits, Math.max(t.plannedSessions, 2 * shown)));
  }
  return Math.max(predicted, shown);
}

/** Sessions closed lately past this fraction of those open (1/LEAVING_SHARE) are load leaving the plane. */
const LEAVING_SHARE = 4;

export type ShedReason = "vad_behind" | "gateway_busy" | "decisions_late" | "audio_backlog";

/**
 * Whether to give back a session now (the gateway closes its newest one 1013
 * upstream_backpressure). `lastShedAt`: when this gateway last shed (null: never).
 */
export function decideShed(s: Pick<PlaneSignals, "gatewayLoopDelayMs" | "vad" | "decisionP95Ms" | "acksOverloadedMs" | "openSessions" | "closedRecently">, t: AdmissionThresholds, now: number, lastShedAt: number | null): ShedReason | null {
  if (s.openSessions === 0) return null;
  // Load that is leaving: many sessions closing together (each ends its last item and
  // its audio) put the plane behind for a moment, and shedding cannot relieve that: it
  // gives back the newest session, not the ones closing, and the plane catches up as
  // they finish. Measured: 500 sessions of a herd closing at once put a VAD 1.1 s behind
  // and 3 of the 200 still open were shed.
  if (s.closedRecently * LEAVING_SHARE > s.openSessions) return null;
  if (lastShedAt !== null && now - lastShedAt < t.shedEveryMs) return null;
  if (s.vad && Math.max(s.vad.lagMs, s.vad.loopDelayMs) > t.shedLagMs) return "vad_behind";
  if (s.gatewayLoopDelayMs > t.shedLagMs) return "gateway_busy";
  if (s.decisionP95Ms !== null && s.decisionP95Ms > t.shedLagMs) return "decisions_late";
  if (s.acksOverloadedMs > t.shedAcksMs) return "audio_backlog";
  return null;
}
