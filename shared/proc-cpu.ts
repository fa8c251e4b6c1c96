import { readFileSync } from "node:fs";

/**
 * CPU seconds (user + system) a process has used so far, from /proc (Linux; null when
 * it cannot be read: the process ended, or no /proc).
 */
function processCpuSeconds(pid: number): number | null {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return null;
  }
}

/**
 * The cores a changing set of processes used between successive `take()`s: CPU seconds
 * per wall second, summed over them (a process new since the last take counts from
 * its start; one that ended is left out).
 */
export function cpuMeter(now: () => number = Date.now) {
  let last = new Map<number, number>();
  let lastAt = now();
  return {
    take(pids: number[]): number {
      const at = now();
      const next = new Map<number, number>();
      let used = 0;
      for (const pid of pids) {
        const cpu = processCpuSeconds(pid);
        if (cpu === null) continue;
        next.set(pid, cpu);
        used += cpu - (last.get(pid) ?? 0);
      }
      const cores = at > lastAt ? Math.max(0, used) / ((at - lastAt) / 1000) : 0;
      last = next;
      lastAt = at;
      return cores;
    },
  };
}
