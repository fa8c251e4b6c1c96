import { readFileSync } from "node:fs";

/**
 * A process's scheduler state and CPU time (user + system, clock ticks of 1/100 s) from
 * /proc/<pid>/stat (Linux); undefined when it cannot be read (the process ended, or no
 * /proc). The command name may hold spaces and parentheses: fields are read after its
 * last ")".
 */
export function processStat(pid: number | undefined): { state: string; ticks: number } | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state: fields[0]!, ticks: Number(fields[11]) + Number(fields[12]) };
  } catch {
    return undefined;
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
        const stat = processStat(pid);
        if (!stat) continue;
        const cpu = stat.ticks / 100;
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
