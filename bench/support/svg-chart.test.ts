import { describe, expect, it } from "vitest";
import { buildChart, renderPage, type ChartSpec } from "./benchmarks-page";
import type { BenchResults } from "./results";
import { niceTicks, renderSvg } from "./svg-chart";

const machine = { cores: 2, cpu_model: "Test CPU", memory_gib: 24, load_average_start: [1.5, 1, 1], load_average_end: [2.5, 1, 1], node: "v20" };
const file = (bench: string, date: string, rows: BenchResults["rows"], command = `./scripts/bench.sh ${bench}`): BenchResults => ({ bench, date, commit: "abc123def456", command, machine, rows });

const latency: ChartSpec = {
  file: "x.svg",
  bench: "realtime",
  title: "Latency against sessions",
  about: "about",
  kind: "line",
  x: "held",
  xLabel: "sessions held",
  yLabel: "ms",
  y: [
    { field: "p50", label: "p50" },
    { field: "p99", label: "p99", dashed: true },
  ],
  series: (r) => String(r.engine),
  filter: (r) => r.engine !== "excluded",
};

/** The points of each series as drawn: data-series → [cx, cy][] in the SVG. */
function drawn(svg: string): Map<string, number[][]> {
  const out = new Map<string, number[][]>();
  for (const g of svg.matchAll(/<g class="series" data-series="([^"]*)">([\s\S]*?)<\/g>/g)) {
    out.set(g[1]!, [...g[2]!.matchAll(/<circle cx="([\d.]+)" cy="([\d.]+)"/g)].map((m) => [Number(m[1]), Number(m[2])]));
  }
  return out;
}

describe("charts from results files", () => {
  const results = [
    file("realtime", "2026-11-28T10:00:00Z", [
      { engine: "zero", held: 10, p50: 40, p99: 100 },
      { engine: "zero", held: 100, p50: 80, p99: 300 },
      { engine: "excluded", held: 50, p50: 9999, p99: 9999 },
    ]),
    file("realtime", "2026-11-29T10:00:00Z", [
      { engine: "whisper", held: 4, p50: 600, p99: null },
      { engine: "whisper", held: 2, p50: 500, p99: 700 },
    ]),
    file("segment", "2026-11-29T10:00:00Z", [{ engine: "zero", held: 1, p50: 1, p99: 1 }]),
  ];

  it("one series per engine and y field, whatever the results hold; rows filtered; other benches ignored", () => {
    const { chart, sources } = buildChart(latency, results);
    expect(chart.series.map((s) => s.name)).toEqual(["zero, p50", "zero, p99", "whisper, p50", "whisper, p99"]);
    expect(chart.series[0]!.points).toEqual([{ x: 10, y: 40 }, { x: 100, y: 80 }]);
    expect(chart.series[3]!.points).toEqual([{ x: 2, y: 700 }]); // a null figure is no point
    expect(chart.series[1]!.dashed).toBe(true);
    expect(sources.map((s) => s.date)).toEqual(["2026-11-28T10:00:00Z", "2026-11-29T10:00:00Z"]);
  });

  it("a newer results file replaces the same series of an older one and keeps the others", () => {
    const rerun = file("realtime", "2026-11-30T10:00:00Z", [{ engine: "zero", held: 20, p50: 45, p99: 90 }]);
    const { chart, sources } = buildChart(latency, [rerun, ...results]);
    expect(chart.series.find((s) => s.name === "zero, p50")!.points).toEqual([{ x: 20, y: 45 }]);
    expect(chart.series.find((s) => s.name === "whisper, p50")!.points).toHaveLength(2);
    expect(sources.map((s) => s.date).sort()).toEqual(["2026-11-29T10:00:00Z", "2026-11-30T10:00:00Z"]);
  });

  it("the SVG has one polyline per series, its points where the figures put them", () => {
    const svg = renderSvg(buildChart(latency, results).chart);
    expect(svg.startsWith("<svg xmlns=\"http://www.w3.org/2000/svg\"")).toBe(true);
    const series = drawn(svg);
    expect([...series.keys()]).toEqual(["zero, p50", "zero, p99", "whisper, p50", "whisper, p99"]);
    expect((svg.match(/<polyline /g) ?? []).length).toBe(4);
    expect(svg).toContain('stroke-dasharray="6 4"');
    // zero p50: (10, 40) and (100, 80); the y axis runs 0..800 (ticks of 200) over 300 px from y = 340
    const [a, b] = series.get("zero, p50")!;
    expect(a![1]).toBeCloseTo(340 - (40 / 800) * 300, 1);
    expect(b![1]).toBeCloseTo(340 - (80 / 800) * 300, 1);
    expect(b![0]).toBeGreaterThan(a![0]!); // x grows to the right
    // whisper's points are sorted by x: 2 before 4
    const w = series.get("whisper, p50")!;
    expect(w[0]![0]).toBeLessThan(w[1]![0]!);
    expect(w[0]![1]).toBeCloseTo(340 - (500 / 800) * 300, 1);
    for (const label of ["sessions held", "ms", "Latency against sessions", ">800<", ">0<"]) expect(svg).toContain(label);
  });

  it("a bar chart has one bar per series and category, as high as its figure", () => {
    const spec: ChartSpec = { ...latency, kind: "bar", x: "setting", y: [{ field: "p50", label: "p50" }], series: () => "", filter: undefined };
    const svg = renderSvg(buildChart(spec, [file("realtime", "2026-11-29T10:00:00Z", [{ setting: "server_vad 500 ms", p50: 700 }, { setting: "semantic_vad high", p50: 350 }])]).chart);
    // bars carry their figure as a title; the legend's swatch does not
    const bars = [...svg.matchAll(/<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)" fill="[^"]+"><title>/g)].map((m) => Number(m[1]));
    expect(bars).toHaveLength(2);
    expect(bars[0]).toBeCloseTo(300 * (700 / 800), 0);
    expect(bars[1]).toBeCloseTo(300 * (350 / 800), 0);
    expect(svg).toContain(">server_vad 500 ms<");
  });

  it("no results: an empty chart that says so, and the page names the command to run", () => {
    const built = buildChart(latency, []);
    expect(renderSvg(built.chart)).toContain("no results yet");
    expect(renderPage([latency], [built], "benchmarks")).toContain("run `./scripts/bench.sh realtime`");
  });

  it("the page shows each chart, its figures and the command, date, commit and machine behind them", () => {
    const page = renderPage([latency], [buildChart(latency, results)], "benchmarks");
    expect(page).toContain("![Latency against sessions](benchmarks/x.svg)");
    expect(page).toContain("| sessions held | zero, p50 | zero, p99 | whisper, p50 | whisper, p99 |");
    expect(page).toContain("| 10 | 40 | 100 | — | — |");
    expect(page).toContain("`./scripts/bench.sh realtime` (2026-11-28 10:00 UTC, commit abc123def456; 2 cores (Test CPU), 24 GiB, load average 1.5 at the start and 2.5 at the end)");
  });

  it("ticks are round numbers covering the data", () => {
    expect(niceTicks(0, 730)).toEqual([0, 200, 400, 600, 800]);
    expect(niceTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0, 300)).toEqual([0, 100, 200, 300]);
    expect(niceTicks(0, 4)).toEqual([0, 1, 2, 3, 4]);
  });
});
