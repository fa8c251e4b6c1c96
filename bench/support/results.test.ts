import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { fileStamp, recordResults, type BenchResults } from "./results";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("recordResults", () => {
  it("writes <bench>-<date>.json with the machine, the date, the commit, the command and the rows", () => {
    const dir = mkdtempSync(join(tmpdir(), "bench-results-"));
    dirs.push(dir);
    const now = new Date("2026-11-29T01:02:03.456Z");
    const rows = [{ sessions: 10, held: 10, vad_decision_p50_ms: 41 }, { sessions: 50, held: 49, vad_decision_p50_ms: null }];
    const path = recordResults("realtime", rows, { env: { BENCH_RESULTS_DIR: dir, BENCH_COMMAND: "./scripts/bench.sh realtime --sessions 10,50", BENCH_ROUNDS: "2" }, argv: ["node", "bench/realtime.ts"], now });
    expect(path).toBe(join(dir, "realtime-2026-11-29T010203.json"));
    expect(readdirSync(dir)).toEqual(["realtime-2026-11-29T010203.json"]);
    const written = JSON.parse(readFileSync(path!, "utf8")) as BenchResults;
    expect(written).toMatchObject({ bench: "realtime", date: now.toISOString(), rows });
    expect(written.command).toBe("BENCH_ROUNDS=2 ./scripts/bench.sh realtime --sessions 10,50");
    expect(written.commit).toMatch(/^([0-9a-f]{12}(-dirty)?|unknown)$/);
    expect(written.machine.cores).toBeGreaterThanOrEqual(1);
    expect(written.machine.cpu_model.length).toBeGreaterThan(0);
    expect(written.machine.memory_gib).toBeGreaterThan(0);
    expect(written.machine.load_average_start).toHaveLength(3);
    expect(written.machine.load_average_end).toHaveLength(3);
  });

  it("names the tsx command when not run by scripts/bench.sh", () => {
    const dir = mkdtempSync(join(tmpdir(), "bench-results-"));
    dirs.push(dir);
    const path = recordResults("diarization", [], { env: { BENCH_RESULTS_DIR: dir }, argv: ["node", "/x/bench/diarization.ts", "--conversations", "2"] });
    expect((JSON.parse(readFileSync(path!, "utf8")) as BenchResults).command).toBe("npx tsx bench/diarization.ts --conversations 2");
  });

  it("writes nothing without BENCH_RESULTS_DIR", () => {
    expect(recordResults("realtime", [{ a: 1 }], { env: {} })).toBeNull();
  });

  it("file stamps sort by time", () => {
    expect(fileStamp("2026-11-29T09:59:59.999Z") < fileStamp("2026-11-29T10:00:00.000Z")).toBe(true);
  });
});
