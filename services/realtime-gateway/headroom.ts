import { correctedCapacity, decideAdmission, decideShed, type AdmissionThresholds, type AdmissionVerdict, type PlaneSignals, type ShedReason } from "../../domain/sessions/admission";
import type { Logger } from "../../shared/logger";
import { loopDelayWindow } from "../../shared/loop-delay";
import { machineLoadWindow } from "../../shared/machine-load";
import { rtAdmissionsRefused, rtSessionsShed } from "../../shared/metrics";
import type { Nats } from "../../shared/nats";
import { BACKLOG_EVERY_MS, sharedBacklogView, watchVadLoad } from "../../shared/realtime-backlog";

/**
 * A gateway's view of the realtime plane's headroom, for admission and shedding
 * (domain/sessions/admission.ts decides; this gathers the signals and keeps count):
 * its own event-loop delay (sampled every 500 ms), the VAD decision latency of its
 * sessions (p95 of the last 2 s, sampled with it), the VADs' load reports and the
 * rt-transcribers' backlog reports (core NATS, shared/realtime-backlog.ts), its machine's
 * busy cores (shared/machine-load.ts), how long its
 * audio batches have been over their acks bound, the sessions it admitted lately (and
 * those not open yet), and the prediction of how many sessions the plane holds.
 *
 * Refusals and sheds are counted in metrics (`stt_realtime_admissions_refused_total`,
 * `stt_realtime_sessions_shed_total`, by reason) and logged at most once per reason
 * every 5 s with the signals that decided them.
 */
export interface Headroom {
  /** Whether one more session may be admitted now; an admission is counted at once (concurrent upgrades see each other). */
  claim(): AdmissionVerdict;
  /** A session admitted by `claim` is open now (counted in openSessions from here on), or its upgrade failed. */
  settled(): void;
  /** A session on this gateway closed (load leaving the plane, for shedding). */
  closed(): void;
  /** A VAD decision's latency as the gateway measured it (session-metrics.ts). */
  decided(latencyMs: number): void;
  /** Called by the gateway's sweep: a reason to give back the newest session now, or null. */
  shedNow(now: number): ShedReason | null;
  stop(): void;
}

export interface HeadroomOptions {
  nats: Nats;
  thresholds: AdmissionThresholds;
  /** How long the gateway's audio batches in flight have been over their bound, worst partition (ms; 0: under). */
  acksOverloadedMs(now: number): number;
  /** Sessions open on this gateway. */
  openSessions(): number;
  logger: Logger;
  now?: () => number;
}

const LOG_EVERY_MS = 5000;
/** The decisions the latency signal is read from: those of the last few seconds, if there are enough to say. */
const DECISION_WINDOW_MS = 2000;
const MIN_DECISIONS = 20;
const MAX_DECISIONS = 4096;
/**
 * An admitted upgrade not open after this long (refused later for its key's limits, or
 * its client gone) stops counting as in flight: that is an upgrade's worst time through
 * its KV writes under a herd, with room.
 */
const IN_FLIGHT_MS = 10_000;
/** Closes this recent are load still leaving the plane: a session's last item is decoded and stored within a few seconds of its close. */
const CLOSES_WINDOW_MS = 5000;

export function createHeadroom(options: HeadroomOptions): Headroom {
  const { thresholds: t, logger } = options;
  const now = options.now ?? Date.now;
  const vad = watchVadLoad(options.nats, now);
  const backlog = sharedBacklogView(options.nats);
  const loop = loopDelayWindow();
  let loopDelayMs = 0;
  // recent decisions (ring of times and latencies), and their p95 as of the last sample
  const decidedAt = new Float64Array(MAX_DECISIONS);
  const decisionMs = new Float64Array(MAX_DECISIONS);
  let decisions = 0;
  let decisionP95Ms: number | null = null;
  const sampleDecisions = (at: number) => {
    const recent: number[] = [];
    for (let i = decisions - 1; i >= Math.max(0, decisions - MAX_DECISIONS) && at - decidedAt[i % MAX_DECISIONS]! < DECISION_WINDOW_MS; i--) recent.push(decisionMs[i % MAX_DECISIONS]!);
    recent.sort((a, b) => a - b);
    decisionP95Ms = recent.length >= MIN_DECISIONS ? recent[Math.floor(recent.length * 0.95)]! : null;
  };
  // the machine's busy cores, averaged over the last second or two (a half-second window
  // swings with the audio's batches and collections)
  const machineLoad = machineLoadWindow();
  let busyCores: number | null = null;
  const sampleMachine = () => {
    // 0: the machine's CPU is not the plane's to judge by (shared with other work)
    if (t.maxMachineShare === 0) return;
    const busy = machineLoad.take();
    if (busy !== null) busyCores = busyCores === null ? busy : 0.5 * busyCores + 0.5 * busy;
  };
  /** How many sessions the plane is predicted to hold at its targets (domain/sessions/admission.ts `correctedCapacity`). */
  let predictedSessions = t.plannedSessions;
  const sampler = setInterval(() => {
    loopDelayMs = loop.take();
    sampleMachine();
    const at = now();
    sampleDecisions(at);
    predictedSessions = correctedCapacity(predictedSessions, signals(at), t);
  }, BACKLOG_EVERY_MS);
  sampler.unref();
  /** When recent admissions happened, oldest first (pruned past settleMs). */
  const admittedAt: number[] = [];
  /** When the admissions not open yet were made, oldest first (an upgrade that never opens stops counting after IN_FLIGHT_MS). */
  const inFlightAt: number[] = [];
  /** When sessions closed lately, oldest first (pruned past CLOSES_WINDOW_MS). */
  const closedAt: number[] = [];
  /** When recent refusals happened, for any reason, oldest first (pruned past settleMs). */
  const refusedAt: number[] = [];
  let lastShedAt: number | null = null;
  const lastLogged = new Map<string, { at: number; count: number }>();

  const signals = (at: number): PlaneSignals => {
    while (admittedAt.length > 0 && at - admittedAt[0]! >= t.settleMs) admittedAt.shift();
    while (refusedAt.length > 0 && at - refusedAt[0]! >= t.settleMs) refusedAt.shift();
    while (inFlightAt.length > 0 && at - inFlightAt[0]! >= IN_FLIGHT_MS) inFlightAt.shift();
    while (closedAt.length > 0 && at - closedAt[0]! >= CLOSES_WINDOW_MS) closedAt.shift();
    const saturated = backlog.saturated();
    return {
      gatewayLoopDelayMs: loopDelayMs,
      vad: vad.worst(),
      decisionP95Ms,
      acksOverloadedMs: options.acksOverloadedMs(at),
      engineSaturatedRetryAfterS: saturated ? saturated.max_wait_ms / 1000 : null,
      openSessions: options.openSessions(),
      admittedRecently: admittedAt.length,
      inFlight: inFlightAt.length,
      predictedSessions,
      closedRecently: closedAt.length,
      refusedRecently: refusedAt.length,
      machine: busyCores !== null ? { busyCores, cores: machineLoad.cores } : null,
    };
  };

  /** One log line per reason every LOG_EVERY_MS, with how many it stands for. */
  const note = (what: "refused" | "shed", reason: string, s: PlaneSignals, at: number, cause?: string) => {
    const key = `${what}:${reason}`;
    const seen = lastLogged.get(key) ?? { at: 0, count: 0 };
    seen.count++;
    lastLogged.set(key, seen);
    if (at - seen.at < LOG_EVERY_MS) return;
    const fields = { reason, count: seen.count, open_sessions: s.openSessions, loop_delay_ms: Math.round(s.gatewayLoopDelayMs), vad_lag_ms: s.vad ? Math.round(s.vad.lagMs) : null, vad_loop_delay_ms: s.vad ? Math.round(s.vad.loopDelayMs) : null, decision_p95_ms: s.decisionP95Ms === null ? null : Math.round(s.decisionP95Ms), acks_overloaded_ms: s.acksOverloadedMs, admitted_recently: s.admittedRecently, in_flight: s.inFlight, predicted_sessions: s.predictedSessions, machine_busy_cores: s.machine ? Number(s.machine.busyCores.toFixed(2)) : null, engine_speakers: s.vad?.engine?.speakers ?? null, engine_load: s.vad?.engine ? Number(s.vad.engine.load.toFixed(3)) : null, ...(cause ? { cause } : {}) };
    if (what === "refused") logger.warn("refusing realtime sessions: the plane has no headroom", fields);
    else logger.warn("shedding the newest realtime session: the plane is far behind", fields);
    lastLogged.set(key, { at, count: 0 });
  };

  return {
    claim() {
      const at = now();
      const s = signals(at);
      const verdict = decideAdmission(s, t);
      if (verdict.admit) {
        admittedAt.push(at);
        inFlightAt.push(at);
      }
      else {
        refusedAt.push(at);
        rtAdmissionsRefused.inc({ reason: verdict.reason });
        note("refused", verdict.reason, s, at, verdict.cause);
      }
      return verdict;
    },
    settled() {
      inFlightAt.shift();
    },
    closed() {
      closedAt.push(now());
    },
    decided(latencyMs) {
      decidedAt[decisions % MAX_DECISIONS] = now();
      decisionMs[decisions % MAX_DECISIONS] = latencyMs;
      decisions++;
    },
    shedNow(at) {
      const s = signals(at);
      const reason = decideShed(s, t, at, lastShedAt);
      if (reason) {
        lastShedAt = at;
        rtSessionsShed.inc({ reason });
        note("shed", reason, s, at);
      }
      return reason;
    },
    stop() {
      clearInterval(sampler);
      loop.stop();
      vad.stop();
    },
  };
}

/** The session a shed gives back: the one opened last that is not already closing (a Set iterates in insertion order). */
export function newestOpen<S extends { connected: boolean }>(sessions: Set<S>): S | undefined {
  let newest: S | undefined;
  for (const s of sessions) if (s.connected) newest = s;
  return newest;
}
