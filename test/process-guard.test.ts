import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FATAL_EXIT_CODE } from "../shared/process-guard";

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
