/**
 * A small SVG line and bar chart writer for docs/benchmarks.md (bench/plot.ts).
 *
 * Written here rather than taken from a charting library: the page needs two kinds of
 * chart (lines over a numeric x, grouped bars over categories) with axes, ticks and a
 * legend, about 150 lines. The headless choices on npm cost far more than that: vega +
 * vega-lite render SVG without a browser but bring some 30 packages and lay out text by
 * font metrics they only have with node-canvas (a native build); D3 needs a DOM (jsdom).
 * The output here is plain, deterministic SVG (the same figures give the same bytes, so
 * a committed chart only changes when its figures do) and it is tested point by point.
 */

interface Point {
  x: number | string;
  y: number;
}

export interface Series {
  name: string;
  points: Point[];
  /** Drawn dashed (e.g. a p99 beside its p50). */
  dashed?: boolean;
}

export interface Chart {
  title: string;
  xLabel: string;
  yLabel: string;
  /** line: x numeric, points joined; bar: x as categories, one bar per series in each. */
  kind: "line" | "bar";
  series: Series[];
}

const WIDTH = 720;
const PLOT_HEIGHT = 300;
const MARGIN = { left: 72, right: 40, top: 40, bottom: 64 };
const LEGEND_LINE = 18;
/** Okabe–Ito: told apart with the common colour-vision deficiencies. */
const COLOURS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"];

const escapeXml = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
const r1 = (n: number) => Math.round(n * 10) / 10;

/** A tick step of 1, 2 or 5 × 10^k giving about `count` intervals over `span`. */
function niceStep(span: number, count = 5): number {
  if (!(span > 0)) return 1;
  const raw = span / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw)!;
  return step;
}

/** Ticks from `min` (rounded down to a step) to at least `max`. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  const step = niceStep(max - min, count);
  const from = Math.floor(min / step) * step;
  const ticks: number[] = [];
  for (let t = from; t < max + step * 0.999; t += step) ticks.push(Number(t.toPrecision(12)));
  if (ticks.length < 2) ticks.push(Number((from + step).toPrecision(12)));
  return ticks;
}

export const formatNumber = (n: number) => (Math.abs(n) >= 10_000 ? n.toLocaleString("en-US", { maximumFractionDigits: 0 }) : String(Number(n.toPrecision(3))));

/** A category under its bars; one wider than its band (at about 7 px a character) breaks at its last space. */
function categoryLabel(label: string, x: number, y: number, band: number): string {
  const cut = label.lastIndexOf(" ");
  if (label.length * 7 <= band || cut < 0) return `<text x="${x}" y="${y}" text-anchor="middle">${escapeXml(label)}</text>`;
  return `<text x="${x}" y="${y}" text-anchor="middle"><tspan x="${x}">${escapeXml(label.slice(0, cut))}</tspan><tspan x="${x}" dy="14">${escapeXml(label.slice(cut + 1))}</tspan></text>`;
}

/** The chart as a standalone SVG document. */
export function renderSvg(chart: Chart): string {
  const legendHeight = chart.series.length * LEGEND_LINE + 8;
  const height = MARGIN.top + PLOT_HEIGHT + MARGIN.bottom + legendHeight;
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const points = chart.series.flatMap((s) => s.points);
  const yTicks = niceTicks(0, Math.max(0, ...points.map((p) => p.y)) || 1);
  const yMax = yTicks.at(-1)!;
  const yAt = (y: number) => r1(MARGIN.top + PLOT_HEIGHT - (y / yMax) * PLOT_HEIGHT);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="12">`,
    `<title>${escapeXml(chart.title)}</title>`,
    `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="${WIDTH / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(chart.title)}</text>`,
  ];
  for (const t of yTicks) {
    out.push(`<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${yAt(t)}" y2="${yAt(t)}" stroke="#e0e0e0"/>`);
    out.push(`<text x="${MARGIN.left - 6}" y="${yAt(t) + 4}" text-anchor="end">${formatNumber(t)}</text>`);
  }
  const axisY = MARGIN.top + PLOT_HEIGHT;
  out.push(`<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${axisY}" y2="${axisY}" stroke="#333"/>`);
  out.push(`<line x1="${MARGIN.left}" x2="${MARGIN.left}" y1="${MARGIN.top}" y2="${axisY}" stroke="#333"/>`);
  out.push(`<text x="${MARGIN.left + plotWidth / 2}" y="${axisY + 44}" text-anchor="middle">${escapeXml(chart.xLabel)}</text>`);
  out.push(`<text transform="translate(18 ${MARGIN.top + PLOT_HEIGHT / 2}) rotate(-90)" text-anchor="middle">${escapeXml(chart.yLabel)}</text>`);

  if (points.length === 0) {
    out.push(`<text x="${MARGIN.left + plotWidth / 2}" y="${MARGIN.top + PLOT_HEIGHT / 2}" text-anchor="middle" fill="#666">no results yet</text>`);
  } else if (chart.kind === "line") {
    const xs = points.map((p) => Number(p.x));
    const xTicks = niceTicks(Math.min(0, ...xs), Math.max(...xs));
    const [x0, x1] = [xTicks[0]!, xTicks.at(-1)!];
    const xAt = (x: number) => r1(MARGIN.left + ((x - x0) / (x1 - x0)) * plotWidth);
    for (const t of xTicks) out.push(`<text x="${xAt(t)}" y="${axisY + 18}" text-anchor="middle">${formatNumber(t)}</text>`);
    chart.series.forEach((s, i) => {
      const colour = COLOURS[i % COLOURS.length]!;
      const sorted = [...s.points].sort((a, b) => Number(a.x) - Number(b.x));
      const coords = sorted.map((p) => `${xAt(Number(p.x))},${yAt(p.y)}`).join(" ");
      out.push(`<g class="series" data-series="${escapeXml(s.name)}">`);
      out.push(`<polyline points="${coords}" fill="none" stroke="${colour}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ""}/>`);
      for (const p of sorted) out.push(`<circle cx="${xAt(Number(p.x))}" cy="${yAt(p.y)}" r="3.5" fill="${colour}"><title>${escapeXml(`${s.name}: ${formatNumber(Number(p.x))}, ${formatNumber(p.y)}`)}</title></circle>`);
      out.push(`</g>`);
    });
  } else {
    const categories = [...new Set(points.map((p) => String(p.x)))];
    const band = plotWidth / categories.length;
    const barWidth = (band * 0.8) / chart.series.length;
    categories.forEach((c, ci) => out.push(categoryLabel(c, r1(MARGIN.left + band * (ci + 0.5)), axisY + 18, band)));
    chart.series.forEach((s, i) => {
      const colour = COLOURS[i % COLOURS.length]!;
      out.push(`<g class="series" data-series="${escapeXml(s.name)}">`);
      for (const p of s.points) {
        const x = MARGIN.left + band * (categories.indexOf(String(p.x)) + 0.1) + barWidth * i;
        out.push(
          `<rect x="${r1(x)}" y="${yAt(p.y)}" width="${r1(barWidth)}" height="${r1(axisY - yAt(p.y))}" fill="${colour}"${s.dashed ? ' fill-opacity="0.55"' : ""}><title>${escapeXml(`${s.name}: ${p.x}, ${formatNumber(p.y)}`)}</title></rect>`,
        );
      }
      out.push(`</g>`);
    });
  }
  chart.series.forEach((s, i) => {
    const y = axisY + MARGIN.bottom + i * LEGEND_LINE;
    const colour = COLOURS[i % COLOURS.length]!;
    if (chart.kind === "bar") out.push(`<rect x="${MARGIN.left}" y="${y - 5}" width="24" height="10" fill="${colour}"${s.dashed ? ' fill-opacity="0.55"' : ""}/>`);
    else out.push(`<line x1="${MARGIN.left}" x2="${MARGIN.left + 24}" y1="${y}" y2="${y}" stroke="${colour}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ""}/>`);
    out.push(`<text x="${MARGIN.left + 32}" y="${y + 4}">${escapeXml(s.name)}</text>`);
  });
  out.push(`</svg>`);
  return out.join("\n") + "\n";
}
