import { spawn } from "node:child_process";
import { createWriteStream, readFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { createInterface } from "node:readline";
import { processTree } from "./proc";

/** When a process started (clock ticks since boot, /proc/<pid>/stat), undefined once it is gone. */
function startTime(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")[19];
  } catch {
    return undefined;
  }
}

/** A port nobody listens on now (the kernel's pick; free again once this returns). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * The service started the way ./scripts/start.sh starts it, `bin/stt supervise`, on a
 * free port with `env` over this process's environment, and awaited the way a user
 * would: `GET /readyz` answering 200. Whatever processes the supervisor starts (one
 * `stt serve`, or several for a layout) are found under its pid (`processTree`), not
 * assumed. Its stdout and stderr go to `logFile`; a line saying the supervisor
 * restarted its child is counted (`restarts`), since CPU and memory read from the
 * process tree lose what a process that died had used.
 */
export async function startSupervised(env: Record<string, string>, logFile: string, readyTimeoutMs = 180_000) {
  const port = await freePort();
  const proc = spawn("bin/stt", ["supervise"], { env: { ...process.env, ...env, HOST: "127.0.0.1", PORT: String(port) }, stdio: ["ignore", "pipe", "pipe"] });
  const log = createWriteStream(logFile);
  let restarts = 0;
  let tail: string[] = [];
  for (const stream of [proc.stdout!, proc.stderr!]) {
    createInterface({ input: stream, crlfDelay: Infinity }).on("line", (line) => {
      log.write(`${line}\n`);
      if (line.includes("supervised process exited: restarting")) restarts++;
      tail.push(line);
      if (tail.length > 40) tail = tail.slice(-20);
    });
  }
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  const baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`stt supervise exited ${proc.exitCode ?? proc.signalCode}:\n${tail.join("\n")}`);
    if (Date.now() > deadline) {
      proc.kill("SIGTERM");
      throw new Error(`not ready within ${readyTimeoutMs} ms:\n${tail.join("\n")}`);
    }
    const status = await fetch(`${baseUrl}/readyz`).then(
      (r) => {
        void r.body?.cancel();
        return r.status;
      },
      () => 0,
    );
    if (status === 200) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  return {
    pid: proc.pid!,
    port,
    baseUrl,
    restarts: () => restarts,
    /**
     * SIGTERM to the supervisor, which passes it to its children and exits once they
     * have stopped; whatever is still running after `timeoutMs` gets SIGKILL, pid by pid
     * (the supervisor's child runs in a process group of its own).
     */
    async stop(timeoutMs = 30_000): Promise<void> {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const tree = processTree(proc.pid!).map((pid) => ({ pid, started: startTime(pid) }));
      proc.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, timeoutMs))]);
      // only a pid that is still the process it was (its start time unchanged), never a reused one
      for (const { pid, started } of tree.reverse()) {
        if (started === undefined || startTime(pid) !== started) continue;
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // ended meanwhile
        }
      }
      await new Promise<void>((resolve) => log.end(resolve));
    },
  };
}
