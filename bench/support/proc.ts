import { processStat } from "../../shared/proc-cpu";
import { readdirSync, readFileSync } from "node:fs";

/** CPU seconds (user + system) a process has used so far, from /proc. */
export function cpuSeconds(pid: number): number {
  const stat = processStat(pid);
  if (!stat) throw new Error(`no /proc/${pid}/stat`);
  return stat.ticks / 100;
}

/** This process's children (e.g. the engine processes a pool spawned). */
export function childPids(): number[] {
  const out = readFileSync(`/proc/${process.pid}/task/${process.pid}/children`, "utf8").trim();
  return out ? out.split(" ").map(Number) : [];
}

/** CPU seconds of every nats-server process on the machine (the benches' bus). */
export function natsCpuSeconds(): number {
  let total = 0;
  for (const pid of readdirSync("/proc").filter((x) => /^\d+$/.test(x))) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, "utf8").trim() !== "nats-server") continue;
      total += cpuSeconds(Number(pid));
    } catch {
      // the process ended while being read
    }
  }
  return total;
}

/** `root` and every process below it (by the parent pid in /proc/<pid>/stat), root first. */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const ppid = Number(readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1]!.split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // the process ended while being read
    }
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) out.push(...(children.get(out[i]!) ?? []));
  return out;
}

/** Resident memory of a process in MB, from /proc/<pid>/status. */
export function rssMb(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
}

/**
 * The machine's cores left free between successive `take()`s, from /proc/stat's first
 * line: idle and I/O wait, and the time of niced processes (they yield to ours), over
 * all time, times the cores; null without /proc (or before a second reading).
 */
export function machineFreeMeter() {
  const read = () => {
    try {
      const fields = readFileSync("/proc/stat", "utf8").slice(0, 256).split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
      // user nice system idle iowait irq softirq steal (guest time is already in user)
      const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
      return { total, free: fields[1]! + fields[3]! + fields[4]! };
    } catch {
      return null;
    }
  };
  let last = read();
  return {
    take(cores: number): number | null {
      const next = read();
      const prev = last;
      last = next;
      if (!next || !prev || next.total <= prev.total) return null;
      return ((next.free - prev.free) / (next.total - prev.total)) * cores;
    },
  };
}
