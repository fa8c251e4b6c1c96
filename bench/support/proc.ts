import { readFileSync } from "node:fs";

/** CPU seconds (user + system) a process has used so far, from /proc. */
export function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** This process's children (e.g. the engine processes a pool spawned). */
export function childPids(): number[] {
  const out = readFileSync(`/proc/${process.pid}/task/${process.pid}/children`, "utf8").trim();
  return out ? out.split(" ").map(Number) : [];
}
