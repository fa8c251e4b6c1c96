import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FATAL_EXIT_CODE, STOP_TIMED_OUT_EXIT_CODE } from "../shared/process-guard";

/**
 * The process-level guard of `stt serve` and `stt supervise`, on real processes: what
 * escapes every handler stops the process with FATAL_EXIT_CODE after a clean stop (never
 * half-alive), and the supervisor starts a fresh one, up to its limit.
 */
const dir = mkdtempSync(join(tmpdir(), "stt-guard-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function run(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, ["--import", "tsx", ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    proc.stdout.on("data", (d) => (output += d));
    proc.stderr.on("data", (d) => (output += d));
    const timer = setTimeout(() => proc.kill("SIGKILL"), 30_000);
    proc.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

describe("process guard", () => {
  for (const how of ["rejection", "exception"]) {
    it(`an unhandled ${how} is logged, the services stopped, and the process exits ${FATAL_EXIT_CODE}`, async () => {
      const { code, output } = await run(["test/support/crash-child.ts", how]);
      expect(code).toBe(FATAL_EXIT_CODE);
      const fatal = output.split("\n").find((l) => l.includes('"fatal error: stopping for a restart"'));
      expect(fatal, output).toBeDefined();
      expect(JSON.parse(fatal!)).toMatchObject({ level: "error", kind: how === "rejection" ? "unhandled_rejection" : "uncaught_exception" });
      expect(output).toContain("stopped cleanly");
    });
  }
});

/** Starts crash-child in `how`, sends `signals` once it is ready (the second after "stop started"); its code, output and the ms from the first signal to its exit. */
function signalled(how: string, signals: NodeJS.Signals[], env: Record<string, string>): Promise<{ code: number | null; output: string; afterSignalMs: number }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, ["--import", "tsx", "test/support/crash-child.ts", how], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    let signalledAt = 0;
    const pending = [...signals];
    const onData = (d: Buffer) => {
      output += d;
      if (signalledAt === 0 && output.includes("ready\n")) {
        signalledAt = Date.now();
        proc.kill(pending.shift()!);
      } else if (pending.length && output.includes("stop started")) proc.kill(pending.shift()!);
    };
    proc.stdout.on("data", onData);
    proc.stderr.on("data", onData);
    const timer = setTimeout(() => proc.kill("SIGKILL"), 60_000);
    proc.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, output, afterSignalMs: Date.now() - signalledAt });
    });
  });
}

describe("stop on a signal", () => {
  it("SIGTERM stops the services and exits 0", async () => {
    const { code, output } = await signalled("wait", ["SIGTERM"], {});
    expect(code, output).toBe(0);
    expect(output).toContain('"msg":"shutting down"');
    expect(output).toContain("stopped cleanly");
  });

  it(`a stop that never finishes ends at SHUTDOWN_TIMEOUT_MS: exit ${STOP_TIMED_OUT_EXIT_CODE} with the pending work logged`, async () => {
    const { code, output, afterSignalMs } = await signalled("stop-hangs", ["SIGTERM"], { SHUTDOWN_TIMEOUT_MS: "1500" });
    expect(code, output).toBe(STOP_TIMED_OUT_EXIT_CODE);
    expect(output).toContain("stop started");
    expect(output).toContain("stop did not finish within SHUTDOWN_TIMEOUT_MS: exiting with work still pending");
    // the deadline is the behaviour: not before it; after it within a margin for a busy machine
    expect(afterSignalMs).toBeGreaterThanOrEqual(1500);
    expect(afterSignalMs).toBeLessThan(1500 + 15_000);
  });

  it("a second SIGINT while stopping exits at once", async () => {
    const { code, output } = await signalled("stop-hangs", ["SIGINT", "SIGINT"], { SHUTDOWN_TIMEOUT_MS: "600000" });
    expect(code, output).toBe(STOP_TIMED_OUT_EXIT_CODE);
    expect(output).toContain("second stop request while stopping: exiting now");
  });
});

describe("stop asked by the supervisor (IPC)", () => {
  /** crash-child `stop-hangs` with an IPC channel, as `stt supervise` starts `stt serve`; `act` runs once it is ready. */
  const underSupervisor = (env: Record<string, string>, act: (proc: ChildProcess, output: () => string) => void) =>
    new Promise<{ code: number | null; output: string; ms: number }>((resolve) => {
      const proc = spawn(process.execPath, ["--import", "tsx", "test/support/crash-child.ts", "stop-hangs"], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe", "ipc"] });
      let output = "";
      let at = 0;
      const onData = (d: Buffer) => {
        output += d;
        if (at === 0 && output.includes("ready\n")) {
          at = Date.now();
          act(proc, () => output);
        }
      };
      proc.stdout!.on("data", onData);
      proc.stderr!.on("data", onData);
      const timer = setTimeout(() => proc.kill("SIGKILL"), 60_000);
      proc.on("exit", (code) => {
        clearTimeout(timer);
        resolve({ code, output, ms: Date.now() - at });
      });
    });

  it("the supervisor's stop message and a terminal's Ctrl-C reaching the whole group count as one stop (bounded), not a second request", async () => {
    const { code, output, ms } = await underSupervisor({ SHUTDOWN_TIMEOUT_MS: "1500" }, (proc, out) => {
      proc.send({ stt: "stop" });
      const sigint = setInterval(() => {
        if (!out().includes("stop started")) return;
        clearInterval(sigint);
        proc.kill("SIGINT");
      }, 10);
    });
    expect(output).not.toContain("second stop request while stopping");
    expect(output).toContain("stop did not finish within SHUTDOWN_TIMEOUT_MS");
    expect(code, output).toBe(STOP_TIMED_OUT_EXIT_CODE);
    expect(ms).toBeGreaterThanOrEqual(1400);
  });

  it("a supervisor gone (its channel closed) ends the child within 300 ms whatever its stop is waiting for", async () => {
    const { code, output, ms } = await underSupervisor({ SHUTDOWN_TIMEOUT_MS: "600000" }, (proc) => proc.disconnect());
    expect(output).toContain('"signal":"supervisor gone"');
    expect(code, output).toBe(STOP_TIMED_OUT_EXIT_CODE);
    expect(ms).toBeLessThan(2_000); // 300 ms and a loaded machine's start of the exit
  });
});

describe("stt supervise", () => {
  it("restarts a crashing child with backoff and gives up after SUPERVISE_MAX_CRASHES with its code", async () => {
    const runs = join(dir, "runs-crash");
    const started = Date.now();
    const { code, output } = await run(["services/stt/main.ts", "supervise", "--", process.execPath, "--import", "tsx", "test/support/crash-child.ts", "rejection", runs], {
      SUPERVISE_INITIAL_DELAY_MS: "100",
      SUPERVISE_MAX_CRASHES: "3",
    });
    expect(code).toBe(FATAL_EXIT_CODE);
    expect(readFileSync(runs, "utf8").trim().split("\n")).toHaveLength(3);
    expect(output.match(/supervised process exited: restarting/g)).toHaveLength(2);
    expect(output).toContain("keeps crashing: giving up");
    expect(Date.now() - started).toBeGreaterThanOrEqual(300); // 100 + 200 ms of backoff
  });

  it("routes uWS's per-upgrade cork warning to the log at debug level and passes other stderr lines through", async () => {
    const runs = join(dir, "runs-uws");
    const quiet = await run(["services/stt/main.ts", "supervise", "--", process.execPath, "--import", "tsx", "test/support/crash-child.ts", "uws-warning", runs], { LOG_LEVEL: "info" });
    expect(quiet.code).toBe(0);
    expect(quiet.output).toContain("an ordinary line");
    expect(quiet.output).not.toContain("writes must be made from within a corked callback");
    const debug = await run(["services/stt/main.ts", "supervise", "--", process.execPath, "--import", "tsx", "test/support/crash-child.ts", "uws-warning", runs], { LOG_LEVEL: "debug" });
    expect(debug.output).toContain("uWS upgrade outside a corked callback");
  });

  it("ends with the child when the child ends cleanly", async () => {
    const runs = join(dir, "runs-ok");
    const { code } = await run(["services/stt/main.ts", "supervise", "--", process.execPath, "--import", "tsx", "test/support/crash-child.ts", "ok", runs]);
    expect(code).toBe(0);
    expect(readFileSync(runs, "utf8").trim().split("\n")).toHaveLength(1);
  });
});

describe("stt supervise, several children (one per group of STT_LAYOUT)", () => {
  it("a child that keeps crashing stops the others and the supervisor exits with its code", async () => {
    const [crashing, waiting] = [join(dir, "runs-many-crash"), join(dir, "runs-many-wait")];
    const { code, output } = await run(["test/support/supervise-children.ts", `rejection:${crashing}`, `wait:${waiting}`]);
    expect(code, output).toBe(FATAL_EXIT_CODE);
    expect(readFileSync(crashing, "utf8").trim().split("\n")).toHaveLength(3);
    // the healthy one ran once, and was stopped (SIGTERM), not killed
    expect(readFileSync(waiting, "utf8").trim().split("\n")).toHaveLength(1);
    expect(output).toContain("keeps crashing: giving up");
    expect(output).toContain("stopped cleanly");
    expect(JSON.parse(output.split("\n").find((l) => l.includes("keeps crashing"))!)).toMatchObject({ group: "rejection" });
  });

  it("a child that ends cleanly is not restarted and the others keep running until they end", async () => {
    const [ending, waiting] = [join(dir, "runs-many-ok"), join(dir, "runs-many-wait-2")];
    const proc = spawn(process.execPath, ["--import", "tsx", "test/support/supervise-children.ts", `ok:${ending}`, `wait:${waiting}`], { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    proc.stdout.on("data", (d) => (output += d));
    proc.stderr.on("data", (d) => (output += d));
    const exited = new Promise<number | null>((r) => proc.once("exit", (c) => r(c)));
    const deadline = Date.now() + 30_000;
    while (!(output.includes("ended cleanly: not restarting it") && output.includes("ready\n")) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(output).toContain("ended cleanly: not restarting it");
    expect(proc.exitCode).toBeNull();
    proc.kill("SIGTERM");
    expect(await exited, output).toBe(0);
    expect(readFileSync(ending, "utf8").trim().split("\n")).toHaveLength(1);
    expect(readFileSync(waiting, "utf8").trim().split("\n")).toHaveLength(1);
    expect(output).toContain("stopped cleanly");
  });
});
