import { existsSync, readFileSync } from "node:fs";

/** Gone: no such process, or a zombie nobody reaped yet (it holds no socket). */
export function gone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  const stat = existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, "utf8") : "";
  return stat === "" || stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
}
