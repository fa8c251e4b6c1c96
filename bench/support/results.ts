import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, loadavg, totalmem } from "node:os";
import { basename, join } from "node:path";

/**
 * A bench's figures as a results file (`bench/results/<bench>-<date>.json`), which
 * `bench/plot.ts` turns into docs/benchmarks.md and its charts. Every bench calls
 * `recordResults` once at the end of its run with its figures as flat rows (one per
 * round, setting or clip: the names of the fields are the bench's own); the file adds
 * what the figures depend on: the machine, the date, the commit and the command.
 * `scripts/bench.sh` sets BENCH_RESULTS_DIR (and BENCH_COMMAND, the command as typed);
 * a bench run some other way writes no file unless BENCH_RESULTS_DIR is set.
 */

type ResultValue = string | number | boolean | null;
export type ResultRow = Record<string, ResultValue>;

interface Machine {
  cores: number;
  cpu_model: string;
  memory_gib: number;
  /** 1-, 5- and 15-minute load averages when the bench started and when it recorded. */
  load_average_start: number[];
  load_average_end: number[];
  node: string;
}

export interface BenchResults {
  bench: string;
  /** ISO time the figures were recorded. */
  date: string;
  /** The commit, with `-dirty` when tracked files other than docs differed from it. */
  commit: string;
  command: string;
  machine: Machine;
  rows: ResultRow[];
}

// taken when a bench imports this module, which is when it starts
const loadAtStart = loadavg().map((x) => Math.round(x * 100) / 100);

function currentCommit(): string {
  try {
    const head = execFileSync("git", ["rev-parse", "--short=12", "HEAD"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    // edits to documentation or to results files do not change what a bench measures
    const changed = ["status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs", ":(exclude)*.md", ":(exclude)bench/results"];
    const dirty = execFileSync("git", changed, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim() !== "";
    return dirty ? `${head}-dirty` : head;
  } catch {
    return "unknown";
  }
}

/** The command as run: BENCH_COMMAND from scripts/bench.sh, else the tsx invocation, with the BENCH_* settings in force. */
function commandLine(env: NodeJS.ProcessEnv, argv: string[]): string {
  const settings = Object.entries(env)
    .filter(([k]) => k.startsWith("BENCH_") && k !== "BENCH_RESULTS_DIR" && k !== "BENCH_COMMAND")
    .map(([k, v]) => `${k}=${v}`);
  const command = env.BENCH_COMMAND ?? ["npx tsx", `bench/${basename(argv[1] ?? "?")}`, ...argv.slice(2)].join(" ");
  return [...settings, command].join(" ");
}

function machine(): Machine {
  return {
    cores: availableParallelism(),
    cpu_model: cpus()[0]?.model.trim() ?? "unknown",
    memory_gib: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    load_average_start: loadAtStart,
    load_average_end: loadavg().map((x) => Math.round(x * 100) / 100),
    node: process.version,
  };
}

/** `2026-11-29T01:02:03.456Z` → `2026-11-29T010203` (sorts by time, no colons in file names). */
export const fileStamp = (iso: string) => iso.slice(0, 19).replace(/:/g, "");

/**
 * Writes the bench's results file and prints its path; returns it (null when no
 * BENCH_RESULTS_DIR). `options` are for tests: the environment and arguments read.
 */
export function recordResults(bench: string, rows: ResultRow[], options: { env?: NodeJS.ProcessEnv; argv?: string[]; now?: Date } = {}): string | null {
  const env = options.env ?? process.env;
  const dir = env.BENCH_RESULTS_DIR;
  if (!dir) return null;
  const date = (options.now ?? new Date()).toISOString();
  const results: BenchResults = { bench, date, commit: currentCommit(), command: commandLine(env, options.argv ?? process.argv), machine: machine(), rows };
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${bench}-${fileStamp(date)}.json`);
  writeFileSync(path, JSON.stringify(results, null, 2) + "\n");
  console.log(`results: ${path}`);
  return path;
}
