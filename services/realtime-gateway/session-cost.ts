import { hostname } from "node:os";
import { machineFreeMeter, ownCpuMeter } from "../../shared/proc-cpu";

/**
 * What one open realtime session costs the plane, measured (for the admission's
 * predicted headroom, domain/sessions/admission.ts): the gateway's process CPU over its
 * open sessions, and the VAD replicas' process CPU (from their load reports) over the
 * sessions they read. Sampled with the other signals (every 500 ms).
 *
 * A sample counts only while the sessions' count is settled: few admissions within the
 * settle time and the CPU window before it (an upgrade costs more than a second of
 * streaming, so a herd's own arrival would otherwise read as the cost of its sessions
 * and shut the door on the rest of it), and at least MIN_MEASURED_SESSIONS open (under
 * that, the process's own baseline — timers, HTTP, metrics — would pass for the
 * sessions' cost). Until then the cost is null and the configured prior stands. A moving
 * average, so one noisy window does not swing the door.
 *
 * And the machine's free cores (idle, and niced processes' time, from /proc/stat), read
 * at the same settled samples: on a machine busy with other work the plane cannot
 * take what its share would allow (a herd of 1,000 admitted at once on this 2-core
 * machine at load 10 fell 8–15 s behind and every session was closed). The sessions
 * admitted since that reading are counted against it until the next one shows them.
 */
const MIN_MEASURED_SESSIONS = 100;
/** A sample counts while the admissions of its window are at most this share of the sessions open. */
const SETTLED_SHARE = 0.05;
const WEIGHT = 0.3;
/** Settled readings of the machine's free cores averaged (every 500 ms: two seconds). */
const FREE_READINGS = 4;

interface VadProcess {
  cores: number;
  sessions: number;
  host: string;
  pid: number;
}

interface SessionCostMeter {
  /** One sample: the gateway's open sessions, how many were admitted within the window that ends now, and the VADs' fresh process reports. */
  sample(openSessions: number, admittedInWindow: number, vads: VadProcess[]): void;
  /** A session was admitted (it counts against the free cores until a settled reading shows it). */
  admitted(): void;
  /** Cores per session as measured so far (null: not yet; the prior stands). */
  current(): { gateway: number | null; vad: number | null };
  /** The machine's free cores at the last settled reading (null: none yet, or no /proc), and the sessions admitted since. */
  free(): { cores: number | null; admittedSince: number };
}

export function sessionCostMeter(machineCores: number): SessionCostMeter {
  const own = ownCpuMeter();
  const machine = machineFreeMeter();
  /** The last few settled readings of free cores (their mean is the figure: another process's load comes and goes within a second). */
  const freeReadings: number[] = [];
  let admittedSince = 0;
  const host = hostname();
  let gateway: number | null = null;
  let vad: number | null = null;
  let vadInProcess = false;
  const average = (prev: number | null, sample: number) => (prev === null ? sample : (1 - WEIGHT) * prev + WEIGHT * sample);
  return {
    sample(openSessions, admittedInWindow, vads) {
      const cores = own.take();
      const free = machine.take(machineCores);
      if (admittedInWindow > SETTLED_SHARE * openSessions) return;
      if (free !== null) {
        // sessions admitted since the readings kept: those readings predate their cost (a
        // herd's room from before it must not be counted again)
        if (admittedSince > admittedInWindow) freeReadings.length = 0;
        freeReadings.push(free);
        if (freeReadings.length > FREE_READINGS) freeReadings.shift();
        // the window's few admissions may not show in it yet
        admittedSince = admittedInWindow;
      }
      if (openSessions < MIN_MEASURED_SESSIONS) return;
      gateway = average(gateway, cores / openSessions);
      // a VAD in this very process: its CPU is already in the gateway's figure
      const elsewhere = vads.filter((v) => !(v.host === host && v.pid === process.pid));
      vadInProcess ||= elsewhere.length < vads.length;
      const sessions = elsewhere.reduce((a, v) => a + v.sessions, 0);
      if (sessions >= MIN_MEASURED_SESSIONS) vad = average(vad, elsewhere.reduce((a, v) => a + v.cores, 0) / sessions);
    },
    admitted: () => void admittedSince++,
    free: () => ({ cores: freeReadings.length ? freeReadings.reduce((a, b) => a + b, 0) / freeReadings.length : null, admittedSince }),
    current: () => ({ gateway, vad: vad ?? (vadInProcess && gateway !== null ? 0 : null) }),
  };
}
