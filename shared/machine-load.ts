import { cpus } from "node:os";

/**
 * The machine's CPU over successive windows, all processes counted (this service's, the
 * NATS server's, anything else on it): `take()` answers the cores busy on average since
 * the last `take()` and starts a new window. Read from the kernel's per-core times
 * (`os.cpus()`, /proc/stat on Linux), so what a session costs the whole machine shows,
 * not only what it costs this process.
 */
export interface MachineLoadWindow {
  /** Cores busy on average over the window (0 … cores); null when no time has passed. */
  take(): number | null;
  readonly cores: number;
}

function times(): { busy: number; total: number } {
  let busy = 0;
  let total = 0;
  for (const c of cpus()) {
    const { user, nice, sys, irq, idle } = c.times;
    busy += user + nice + sys + irq;
    total += user + nice + sys + irq + idle;
  }
  return { busy, total };
}

export function machineLoadWindow(): MachineLoadWindow {
  const cores = Math.max(1, cpus().length);
  let last = times();
  return {
    cores,
    take() {
      const now = times();
      const total = now.total - last.total;
      const busy = now.busy - last.busy;
      last = now;
      return total > 0 ? (busy / total) * cores : null;
    },
  };
}
