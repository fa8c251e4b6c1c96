/**
 * Whether a gateway takes one more realtime session, and when it must give one back:
 * pure decisions on the plane's measured load (services/realtime-gateway/headroom.ts
 * gathers the signals; docs/realtime.md, "Admission and shedding"). No clock, no
 * socket, no NATS in here.
 *
 * The rule users of a real-time service expect: sessions already admitted keep their
 * latency, and the ones the plane cannot serve are refused at the door (HTTP 503 with
 * Retry-After, before `session.created`), for a cause the new session would suffer from.
 *
 * Admission is by predicted cost: the plane knows what one more session costs it (the
 * gateway's and the VADs' CPU per open session, measured while no admission is settling;
 * the engine's per speaker), so a herd that arrives at once is admitted at once up to
 * the predicted headroom, however large, and the rest refused. The prediction is then
 * corrected from measurements: the cost per session is measured again once the herd
 * shows in the CPU, and the lagging signals (event-loop delay, the VAD's lag behind the
 * audio, the VAD decision latency the gateway measures for its sessions, audio acks
 * piling up) refuse whatever the prediction says. Near one of those bounds the
 * prediction is evidently optimistic, and the last sessions are added in small steps.
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
  /** Sessions admitted within the last `settleMs` whose socket has not opened yet (their upgrade is still running). */
  admitting: number;
  /** Sessions this gateway admitted within the last `settleMs` (their cost cannot show in the measurements yet). */
  admittedRecently: number;
  /** Upgrades this gateway refused for the plane's predicted cost within the last `settleMs` (they come back after their Retry-After). */
  refusedRecently: number;
  /**
   * What one open session costs (CPU cores) as measured: the gateway (its process's CPU
   * over its open sessions) and the VADs (theirs over the sessions they read; 0 when the
   * VAD runs in the gateway's process, whose CPU already counts it). null: not measured
   * yet (a cold plane, or too few sessions to tell their cost from the process's own),
   * and the threshold's prior stands for it.
   */
  sessionCores: { gateway: number | null; vad: number | null };
  /** This machine's cores. */
  machineCores: number;
  /**
   * The machine's free cores (idle, or used by niced processes) at the last reading taken
   * while no admission was settling (null: none yet, or unmeasurable), and the sessions
   * admitted since it, whose cost it cannot show.
   */
  machineFree: { cores: number | null; admittedSince: number };
}

export interface AdmissionThresholds {
  /** Refuse while the gateway's loop delay p99 is over this (ms). */
  maxLoopDelayMs: number;
  /** Refuse while a VAD reads the audio later than this after it was stored, or its loop delay is over maxLoopDelayMs (ms). */
  maxVadLagMs: number;
  /** Refuse while the recent VAD decisions' p95 is over this (ms). */
  maxDecisionMs: number;
  /** Refuse unless the streaming engine can take one more speaker (and those admitted within settleMs) within this share of its machine's cores. */
  maxEngineShare: number;
  /** Refuse unless the sessions open, opening and this one, at their cost each, fit within this share of the machine's cores. */
  maxPlaneShare: number;
  /** Cores one session costs the gateway and a VAD until measured (the priors: config RT_GATEWAY_SESSION_CORES, RT_VAD_SESSION_CORES). */
  priorSessionCores: { gateway: number; vad: number };
  /** How long an admitted session takes to show in the measurements (ms). */
  settleMs: number;
  /** Hard cap on a gateway's open sessions (0: none). */
  maxSessions: number;
  /** Shed while the VAD lag or a loop delay is over this (ms) … */
  shedLagMs: number;
  /** … or the acks have been over their bound this long (ms); one session per shedEveryMs. */
  shedAcksMs: number;
  shedEveryMs: number;
}

export type RefusalReason = "engine_saturated" | "session_cap" | "gateway_busy" | "vad_behind" | "decisions_late" | "engine_full" | "engine_busy" | "audio_backlog" | "plane_full" | "plane_near_limit" | "machine_busy";

/** A refusal names its reason (the metric label) and the measured cause (for the refusal's message and the log). */
export type AdmissionVerdict = { admit: true } | { admit: false; reason: RefusalReason; retryAfterSeconds: number; cause: string };

/** Retry-After for a refusal on load: long enough for the plane to show the sessions it just took. */
const LOAD_RETRY_S = 5;
/** The longest Retry-After a queue of refusals asks for. */
const MAX_QUEUE_RETRY_S = 30;
/** Past this share of a bound the plane is near its limit … */
const NEAR_LIMIT = 0.6;
/** … and admits at most this share of the sessions open (at least MIN_STEP) per settle window (as past the machine's free cores). */
const NEAR_LIMIT_STEP = 0.02;
/** The smallest step: ten a second, as the retired burst allowed near a bound. */
const MIN_STEP = 10;
/**
 * The share of the machine's free cores the sessions' gateway and VAD cost may be
 * predicted to take: what grows with them elsewhere takes most of the rest (at 1,000
 * sessions on this 2-core machine, nats-server 15–39% of a core and the clients 19–26%
 * beside the gateway's and VAD's 39–96%, about 0.6 of theirs), and the remainder is the
 * margin that keeps latency (a machine run to its last core queues). On a free 2-core
 * machine, as much as RT_ADMIT_MAX_PLANE_SHARE 0.5 allows. Measured: 1,000 admitted at
 * once beside other work (load 5) held the gateway and VAD at 0.001 cores a session,
 * as the priors say, with nats-server and the client at 0.6 core more, and fell behind.
 */
const FREE_USE = 0.5;
/** A full plane's refused crowd is spread over windows of this share of what it holds (at least one): the rate room is assumed to appear at. */
const QUEUE_STEP = 0.05;

const ms = (v: number) => `${Math.round(v)} ms`;
const share = (v: number) => `${(v * 100).toFixed(1)}%`;
const cores = (v: number) => (v === 0 ? "0" : v >= 0.1 ? v.toFixed(3) : v.toPrecision(2));

export function decideAdmission(s: PlaneSignals, t: AdmissionThresholds): AdmissionVerdict {
  const refuse = (reason: RefusalReason, retryAfterSeconds: number, cause: string): AdmissionVerdict => ({ admit: false, reason, retryAfterSeconds: Math.max(1, Math.ceil(retryAfterSeconds)), cause });
  if (s.engineSaturatedRetryAfterS !== null) return refuse("engine_saturated", s.engineSaturatedRetryAfterS, `utterances wait for an engine past ${s.engineSaturatedRetryAfterS} s`);
  if (t.maxSessions > 0 && s.openSessions >= t.maxSessions) return refuse("session_cap", LOAD_RETRY_S, `${s.openSessions} sessions open, the cap is ${t.maxSessions}`);
  if (s.gatewayLoopDelayMs > t.maxLoopDelayMs) return refuse("gateway_busy", LOAD_RETRY_S, `gateway event-loop delay ${ms(s.gatewayLoopDelayMs)} > ${ms(t.maxLoopDelayMs)}`);
  if (s.vad && s.vad.lagMs > t.maxVadLagMs) return refuse("vad_behind", LOAD_RETRY_S, `voice activity detection reads the audio ${ms(s.vad.lagMs)} late > ${ms(t.maxVadLagMs)}`);
  if (s.vad && s.vad.loopDelayMs > t.maxLoopDelayMs) return refuse("vad_behind", LOAD_RETRY_S, `voice activity detection's event-loop delay ${ms(s.vad.loopDelayMs)} > ${ms(t.maxLoopDelayMs)}`);
  if (s.decisionP95Ms !== null && s.decisionP95Ms > t.maxDecisionMs) return refuse("decisions_late", LOAD_RETRY_S, `voice activity decisions p95 ${ms(s.decisionP95Ms)} > ${ms(t.maxDecisionMs)}`);
  const engine = s.vad?.engine;
  if (engine) {
    // Counted: the speakers still talking, this one, and those admitted lately that are
    // still open (a session admitted and closed since talks no more; what its last
    // utterance still costs while it is decoded is a transient, not a speaker).
    const admittedOpen = Math.min(s.admittedRecently, s.openSessions);
    const predicted = engine.perSpeaker * (engine.speakers + 1 + admittedOpen);
    if (engine.full) return refuse("engine_full", LOAD_RETRY_S, `every streaming decoder is held by a speaker still talking (${engine.speakers})`);
    // with nobody talking the new session has the engine to itself, whatever one costs
    if (engine.speakers + admittedOpen > 0 && predicted > t.maxEngineShare) {
      const who = `${engine.speakers} speaker${engine.speakers === 1 ? "" : "s"} talking${admittedOpen > 0 ? `, ${admittedOpen} admitted lately` : ""} and this one`;
      return refuse("engine_busy", LOAD_RETRY_S, `${who} at ${share(engine.perSpeaker)} of the machine each: ${share(predicted)} > ${share(t.maxEngineShare)}`);
    }
  }
  if (s.acksOverloadedMs > 0) return refuse("audio_backlog", LOAD_RETRY_S, `audio batches over their acks bound for ${ms(s.acksOverloadedMs)}`);
  return predictedHeadroom(s, t, refuse);
}

/**
 * The plane's predicted headroom: the sessions open and opening, and this one, at what
 * one costs the gateway and the VADs (measured, or the prior), within maxPlaneShare of
 * the machine, and those admitted since the machine's free cores were last read within
 * FREE_USE of them. Whatever fits is admitted at once, a herd included; near a lagging
 * bound, or past what the free cores take, only a small step of unmeasured sessions per
 * settle window (the lagging signals then say whether the plane keeps up: a machine busy
 * with other work still gives the plane a share). Retry-After is the honest
 * wait: for the plane to show what it took (the settle time) or for sessions to end, times
 * the windows the refused crowd ahead needs.
 */
function predictedHeadroom(s: PlaneSignals, t: AdmissionThresholds, refuse: (reason: RefusalReason, retryAfterSeconds: number, cause: string) => AdmissionVerdict): AdmissionVerdict {
  const gateway = s.sessionCores.gateway ?? t.priorSessionCores.gateway;
  const vad = s.sessionCores.vad ?? t.priorSessionCores.vad;
  const each = gateway + vad;
  const budget = t.maxPlaneShare * s.machineCores;
  // the sessions the budget holds at this cost (the epsilon: 1,000 × 0.001 is 1.0000000000000002)
  const fits = each > 0 ? Math.floor(budget / each + 1e-9) : Infinity;
  const counted = s.openSessions + s.admitting;
  const settleS = t.settleMs / 1000;
  const queue = (base: number, step: number) => Math.min(MAX_QUEUE_RETRY_S, base * Math.ceil((s.refusedRecently + 1) / Math.max(1, step)));
  if (counted + 1 > fits) {
    const how = (v: number | null) => (v === null ? "prior" : "measured");
    const cause = `${counted} session${counted === 1 ? "" : "s"} open or opening and this one at ${cores(each)} cores each (gateway ${cores(gateway)} ${how(s.sessionCores.gateway)}, voice activity detection ${cores(vad)} ${how(s.sessionCores.vad)}): ${cores((counted + 1) * each)} cores > ${cores(budget)} cores (${share(t.maxPlaneShare)} of ${s.machineCores})`;
    // sessions admitted lately have not shown what they cost yet: the wait is for them to show
    return refuse("plane_full", queue(s.admittedRecently > 0 ? Math.max(1, settleS) : LOAD_RETRY_S, Number.isFinite(fits) ? Math.ceil(QUEUE_STEP * fits) : 1), cause);
  }
  const step = Math.max(MIN_STEP, Math.floor(NEAR_LIMIT_STEP * s.openSessions));
  if (s.admittedRecently < step) return { admit: true };
  const stepCause = `${s.admittedRecently} sessions admitted in the last ${ms(t.settleMs)}, the step is ${step} (${share(NEAR_LIMIT_STEP)} of ${s.openSessions} open, at least ${MIN_STEP})`;
  const near = nearLimit(s, t);
  if (near) return refuse("plane_near_limit", queue(Math.max(1, settleS), step), `${near}, past ${share(NEAR_LIMIT)} of its bound: ${stepCause}`);
  const free = s.machineFree;
  if (free.cores !== null && (free.admittedSince + 1) * each > FREE_USE * free.cores + 1e-9) {
    const cause = `the machine had ${cores(free.cores)} cores free (measured), ${free.admittedSince} sessions admitted since and this one at ${cores(each)} cores each: ${cores((free.admittedSince + 1) * each)} cores > ${share(FREE_USE)} of it; ${stepCause}`;
    return refuse("machine_busy", queue(Math.max(1, settleS), step), cause);
  }
  return { admit: true };
}

/** The lagging signal past NEAR_LIMIT of its bound, named, or null. */
function nearLimit(s: PlaneSignals, t: AdmissionThresholds): string | null {
  if (s.gatewayLoopDelayMs > NEAR_LIMIT * t.maxLoopDelayMs) return `gateway event-loop delay ${ms(s.gatewayLoopDelayMs)}`;
  if (s.vad && s.vad.lagMs > NEAR_LIMIT * t.maxVadLagMs) return `voice activity detection reads the audio ${ms(s.vad.lagMs)} late`;
  if (s.vad && s.vad.loopDelayMs > NEAR_LIMIT * t.maxLoopDelayMs) return `voice activity detection's event-loop delay ${ms(s.vad.loopDelayMs)}`;
  if (s.decisionP95Ms !== null && s.decisionP95Ms > NEAR_LIMIT * t.maxDecisionMs) return `voice activity decisions p95 ${ms(s.decisionP95Ms)}`;
  return null;
}

export type ShedReason = "vad_behind" | "gateway_busy" | "decisions_late" | "audio_backlog";

/**
 * Whether to give back a session now (the gateway closes its newest one 1013
 * upstream_backpressure). `lastShedAt`: when this gateway last shed (null: never).
 */
export function decideShed(s: Pick<PlaneSignals, "gatewayLoopDelayMs" | "vad" | "decisionP95Ms" | "acksOverloadedMs" | "openSessions">, t: AdmissionThresholds, now: number, lastShedAt: number | null): ShedReason | null {
  if (s.openSessions === 0) return null;
  if (lastShedAt !== null && now - lastShedAt < t.shedEveryMs) return null;
  if (s.vad && Math.max(s.vad.lagMs, s.vad.loopDelayMs) > t.shedLagMs) return "vad_behind";
  if (s.gatewayLoopDelayMs > t.shedLagMs) return "gateway_busy";
  if (s.decisionP95Ms !== null && s.decisionP95Ms > t.shedLagMs) return "decisions_late";
  if (s.acksOverloadedMs > t.shedAcksMs) return "audio_backlog";
  return null;
}
