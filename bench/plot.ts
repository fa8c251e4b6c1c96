/**
 * Draws docs/benchmarks.md and its charts (docs/benchmarks/*.svg) from the results files
 * the benches wrote (bench/results/*.json, bench/support/results.ts):
 *
 *   ./scripts/bench.sh plots   (= npx tsx bench/plot.ts [--results bench/results] [--docs docs])
 *
 * No services needed. The charts and what each reads are CHARTS below; a bench that
 * records new series (another engine, another model) shows up without a change here.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildChart, renderPage, type ChartSpec } from "./support/benchmarks-page";
import type { BenchResults } from "./support/results";
import { renderSvg } from "./support/svg-chart";

const khz = (rate: unknown) => `${Number(rate) / 1000} kHz`;

const CHARTS: ChartSpec[] = [
  {
    file: "vad-decision.svg",
    bench: "realtime",
    title: "VAD decision latency against sessions held",
    about:
      "bench/realtime.ts with `--engine zero` (a zero-cost engine, so the plane itself is measured): N sessions stream speech in real time; the VAD decision is `speech_stopped` received minus the moment the client sent the audio that let the VAD decide. x: the sessions that streamed to the end with no frame lost (held), y: the decision's p50 and p99.",
    kind: "line",
    x: "held",
    xLabel: "sessions held",
    yLabel: "VAD decision (ms)",
    y: [
      { field: "vad_decision_p50_ms", label: "p50" },
      { field: "vad_decision_p99_ms", label: "p99", dashed: true },
    ],
    series: (r) => `${r.door === "openai" ? "OpenAI door" : "native stream"}, ${khz(r.sample_rate)}`,
    filter: (r) => r.engine === "zero",
  },
  {
    file: "speakers-final.svg",
    bench: "realtime",
    title: "Continuous speakers against final latency, per engine and model",
    about:
      "bench/realtime.ts with a real engine and `--audio librivox` (continuous read speech, 0.8 s pauses): N sessions, each a speaker who does not stop. y: `speech_stopped` → `completed` received, the engine's time included (p50 and p99); one series per engine and model. The embedded engine decodes each utterance while it is spoken (streaming decoders, the default), so its final comes at the commit; an engine that transcribes at commit adds its decoding time.",
    kind: "line",
    x: "sessions",
    xLabel: "continuous speakers (sessions)",
    yLabel: "end of utterance → final (ms)",
    y: [
      { field: "final_p50_ms", label: "p50" },
      { field: "final_p99_ms", label: "p99", dashed: true },
    ],
    series: (r) => `${r.engine} (${r.model})`,
    filter: (r) => r.engine !== "zero",
  },
  {
    file: "segment-latency.svg",
    bench: "segment-parallel",
    title: "Segment latency against clip length",
    about:
      "bench/segment-parallel.ts: real speech posted to `POST /v1/audio/transcriptions` one clip at a time; the wall time the client sees (median over the rounds), with one engine process, one per core (long clips cut at pauses and decoded at once), and worker replicas reached over NATS.",
    kind: "line",
    x: "clip_seconds",
    xLabel: "clip length (s)",
    yLabel: "request wall time (s)",
    y: [{ field: "wall_s", label: "median" }],
    series: (r) => String(r.setup_label ?? r.setup),
  },
  {
    file: "end-of-turn.svg",
    bench: "end-of-turn",
    title: "End of speech → final, per turn detection setting",
    about:
      "bench/end-of-turn.ts: one session per setting streams thirteen turns of recorded speech in 20 ms frames at real time (the embedded engine, streaming decoders); y: the turn's last `completed` received minus when the frame holding its last voiced sample was sent, p50 and p90 over the turns.",
    kind: "bar",
    x: "setting",
    xLabel: "turn detection",
    yLabel: "end of speech → final (ms)",
    y: [
      { field: "final_p50_ms", label: "p50" },
      { field: "final_p90_ms", label: "p90", dashed: true },
    ],
    series: () => "",
    filter: (r) => r.group === "all",
  },
  {
    file: "diarization-der.svg",
    bench: "diarization",
    title: "Diarization error rate per speaker count",
    about:
      "bench/diarization.ts: conversations built from recordings of different people (turns of 2–15 s, 0.1–0.8 s apart), diarized by the embedded diarizer with the speaker count estimated and given; DER on a 10 ms grid with a 0.25 s collar (missed speech, false alarm and confusion), recorded as is and with every other speaker through a telephone band.",
    kind: "bar",
    x: "speakers",
    xLabel: "speakers in the conversation",
    yLabel: "DER (%)",
    y: [{ field: "der_pct", label: "DER" }],
    series: (r) => `${r.channel}, count ${r.count}`,
  },
];

/** Every results file in `dir`. */
function readResults(dir: string): BenchResults[] {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith(".json"));
  } catch {
    return [];
  }
  return files.sort().map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")) as BenchResults);
}

function main() {
  const args = new Map<string, string>();
  for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
  const resultsDir = args.get("results") ?? "bench/results";
  const docsDir = args.get("docs") ?? "docs";
  const results = readResults(resultsDir);
  const built = CHARTS.map((spec) => buildChart(spec, results));
  mkdirSync(join(docsDir, "benchmarks"), { recursive: true });
  CHARTS.forEach((spec, i) => writeFileSync(join(docsDir, "benchmarks", spec.file), renderSvg(built[i]!.chart)));
  writeFileSync(join(docsDir, "benchmarks.md"), renderPage(CHARTS, built, "benchmarks"));
  console.log(`${results.length} results files → ${join(docsDir, "benchmarks.md")} and ${CHARTS.length} charts in ${join(docsDir, "benchmarks")}/`);
  for (const [i, b] of built.entries()) console.log(`  ${CHARTS[i]!.file}: ${b.chart.series.length} series, ${b.chart.series.reduce((n, s) => n + s.points.length, 0)} points`);
}

main();
