import { execFileSync, spawn, type ChildProcess } from "node:child_process";

/**
 * The command that starts `stt serve` as bin/stt does (jemalloc through
 * bin/with-allocator, the V8 flags of bin/node-flags), with `nodeFlags` added for
 * profiling; node runs tsx's loader directly so the spawned pid is the server itself.
 */
export function serveCommand(nodeFlags: string[] = []): [string, string[]] {
  const flags = execFileSync("bin/node-flags", { encoding: "utf8" }).split("\n").filter(Boolean);
  return ["bin/with-allocator", [process.execPath, ...flags, ...nodeFlags, "--import", "tsx", "services/stt/main.ts", "serve"]];
}

/**
 * Waits for a spawned `stt serve` to log "stt is up" and returns its port (the log line's
 * fields come in either order; 0 for a process that serves no port); rejects with the end of its log if it exits first.
 * BENCH_DEBUG=1 echoes its warnings and errors.
 */
export function waitForServer(proc: ChildProcess): Promise<number> {
  return new Promise((resolve, reject) => {
    let log = "";
    const onData = (c: Buffer) => {
      log += c.toString();
      if (process.env.BENCH_DEBUG) for (const line of c.toString().split("\n")) if (/"level":"(warn|error)"/.test(line)) console.log("server:", line.slice(0, 300));
      // a process without a gateway logs no port: 0
      const up = /^.*"msg":"stt is up".*$/m.exec(log);
      if (up) resolve(Number(/"port":(\d+)/.exec(up[0])?.[1] ?? 0));
      if (log.length > 1e6) log = log.slice(-1e5);
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    proc.on("exit", (code) => reject(new Error(`server exited ${code}: ${log.slice(-2000)}`)));
  });
}

/** SIGTERM, then SIGKILL after 5 s. */
export async function stopServer(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null) return;
  const exited = new Promise((r) => proc.once("exit", r));
  proc.kill("SIGTERM");
  await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
  if (proc.exitCode === null) proc.kill("SIGKILL");
}

/** The p-th percentile (nearest rank) of xs; NaN when empty. */
export const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]! : NaN);

/** The zero-cost engine (bench/support/zero-engine.ts) in its own process, stopped when this one exits. */
export async function startZeroEngine(): Promise<{ url: string; proc: ChildProcess }> {
  const proc = spawn(process.execPath, ["--import", "tsx", "bench/support/zero-engine.ts"], { stdio: ["ignore", "pipe", "inherit"] });
  const line = await new Promise<string>((resolve) => proc.stdout!.once("data", (d: Buffer) => resolve(d.toString())));
  process.once("exit", () => proc.kill());
  return { url: (JSON.parse(line) as { url: string }).url, proc };
}
