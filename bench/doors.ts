/**
 * The two realtime doors compared on the same plane: `bench/realtime.ts --engine zero
 * --rate 24000` run alternately for the native door (24 kHz binary frames) and the
 * OpenAI door (24 kHz base64 appends), a fresh server each run, and the VAD decisions of
 * all runs of a door pooled before their percentiles are taken (one run's p99 rests on a
 * dozen decisions and moves 20–40% between runs of the same door on this machine).
 *
 *   npx tsx bench/doors.ts [--sessions 300] [--seconds 30] [--runs 3] [--encode-once 1]
 *
 * Prints each run's line, then per door: held, pooled VAD decision p50/p90/p99, memory
 * per session and server CPU (means over runs), and the OpenAI door's figures against
 * the native door's.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pct } from "./support/server";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const sessions = args.get("sessions") ?? "300";
const seconds = args.get("seconds") ?? "30";
const runs = Number(args.get("runs") ?? 3);
// --encode-once 1: passed on (bench/realtime.ts: the door's clients cost what native ones do)
const encodeOnce = args.has("encode-once") ? ["--encode-once", "1"] : [];

interface Round {
  door: string;
  sessions: number;
  held: number;
  decisions: number[];
  mbPerSession: number;
  serverCpu: number;
}

const dir = mkdtempSync(join(tmpdir(), "doors-"));
const out = join(dir, "rounds.jsonl");
try {
  for (let run = 0; run < runs; run++) {
    for (const door of ["native", "openai"]) {
      const flags = ["bench/realtime.ts", "--engine", "zero", "--sessions", sessions, "--seconds", seconds, "--rate", "24000", ...(door === "openai" ? ["--door", "openai", ...encodeOnce] : [])];
      const r = spawnSync(join("node_modules", ".bin", "tsx"), flags, { env: { ...process.env, BENCH_ROUNDS_OUT: out }, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
      const row = r.stdout.split("\n").find((l) => /^\d+ \| /.test(l));
      console.log(`run ${run + 1} ${door}: ${row ?? `no result (exit ${r.status})`}`);
    }
  }
  const rounds: Round[] = readFileSync(out, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l) as Round);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const summary = (door: string) => {
    const of = rounds.filter((r) => r.door === door);
    const decisions = of.flatMap((r) => r.decisions);
    return {
      held: `${of.reduce((a, r) => a + r.held, 0)}/${of.reduce((a, r) => a + r.sessions, 0)}`,
      decisions: decisions.length,
      p50: pct(decisions, 50),
      p90: pct(decisions, 90),
      p99: pct(decisions, 99),
      perRunP99: of.map((r) => pct(r.decisions, 99)),
      mb: mean(of.map((r) => r.mbPerSession)),
      cpu: mean(of.map((r) => r.serverCpu)),
    };
  };
  const native = summary("native24");
  const openai = summary("openai");
  const vs = (a: number, b: number) => `${a >= b ? "+" : ""}${(((a - b) / b) * 100).toFixed(0)}%`;
  console.log("door | held | VAD decisions pooled | p50/p90/p99 | p99 of each run | MB/session | server CPU");
  for (const [name, s] of [["native 24 kHz", native], ["OpenAI door", openai]] as const) {
    console.log(`${name} | ${s.held} | ${s.decisions} | ${s.p50}/${s.p90}/${s.p99} ms | ${s.perRunP99.join(", ")} ms | ${s.mb.toFixed(3)} | ${s.cpu.toFixed(0)}%`);
  }
  console.log(`OpenAI door vs native: decision p50 ${vs(openai.p50, native.p50)}, p90 ${vs(openai.p90, native.p90)}, p99 ${vs(openai.p99, native.p99)}; memory per session ${vs(openai.mb, native.mb)}; server CPU ${vs(openai.cpu, native.cpu)}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
