/**
 * Diarization error rate as NIST md-eval scores it: on a 10 ms grid, outside a collar
 * around every reference turn boundary, missed speech (reference speakers beyond the
 * hypothesis'), false alarm (the reverse) and confusion (speech attributed to a speaker
 * other than the one mapped to the reference speaker), over the reference speech time.
 * The mapping of hypothesis speakers to reference speakers is the one-to-one mapping with
 * the most overlap (exhaustive over subsets; fine for the handful of speakers scored).
 */
export interface LabelledTurn {
  start: number;
  end: number;
  speaker: string | number;
}

export interface DerScore {
  /** Seconds of scored reference speech. */
  scored: number;
  missed: number;
  falseAlarm: number;
  confusion: number;
  /** (missed + falseAlarm + confusion) / scored. */
  der: number;
  /** Hypothesis speaker → reference speaker. */
  mapping: Map<string, string>;
}

const STEP = 0.01;

export function diarizationErrorRate(reference: readonly LabelledTurn[], hypothesis: readonly LabelledTurn[], collar = 0.25): DerScore {
  const end = Math.max(0, ...reference.map((t) => t.end), ...hypothesis.map((t) => t.end));
  const n = Math.ceil(end / STEP);
  const refIds = [...new Set(reference.map((t) => String(t.speaker)))];
  const hypIds = [...new Set(hypothesis.map((t) => String(t.speaker)))];
  const mark = (turns: readonly LabelledTurn[], ids: string[]) => {
    const grid = ids.map(() => new Uint8Array(n));
    for (const t of turns) {
      const row = grid[ids.indexOf(String(t.speaker))]!;
      for (let i = Math.max(0, Math.round(t.start / STEP)); i < Math.min(n, Math.round(t.end / STEP)); i++) row[i] = 1;
    }
    return grid;
  };
  const ref = mark(reference, refIds);
  const hyp = mark(hypothesis, hypIds);
  const scored = new Uint8Array(n).fill(1);
  for (const t of reference) {
    for (const edge of [t.start, t.end]) {
      for (let i = Math.max(0, Math.round((edge - collar) / STEP)); i < Math.min(n, Math.round((edge + collar) / STEP)); i++) scored[i] = 0;
    }
  }
  // overlap[h][r]: scored frames where both speak
  const overlap = hypIds.map((_, h) => refIds.map((_, r) => {
    let c = 0;
    for (let i = 0; i < n; i++) if (scored[i] && hyp[h]![i] && ref[r]![i]) c++;
    return c;
  }));
  const best = bestMapping(overlap, refIds.length);
  let total = 0;
  let missed = 0;
  let falseAlarm = 0;
  let confusion = 0;
  for (let i = 0; i < n; i++) {
    if (!scored[i]) continue;
    let nr = 0;
    let nh = 0;
    let correct = 0;
    for (let r = 0; r < refIds.length; r++) nr += ref[r]![i]!;
    for (let h = 0; h < hypIds.length; h++) {
      nh += hyp[h]![i]!;
      const r = best.to[h]!;
      if (r >= 0 && hyp[h]![i] && ref[r]![i]) correct++;
    }
    total += nr;
    missed += Math.max(0, nr - nh);
    falseAlarm += Math.max(0, nh - nr);
    confusion += Math.min(nr, nh) - correct;
  }
  const mapping = new Map<string, string>();
  best.to.forEach((r, h) => r >= 0 && mapping.set(hypIds[h]!, refIds[r]!));
  const s = (frames: number) => Math.round(frames * STEP * 1000) / 1000;
  return { scored: s(total), missed: s(missed), falseAlarm: s(falseAlarm), confusion: s(confusion), der: total ? (missed + falseAlarm + confusion) / total : 0, mapping };
}

/** The one-to-one hypothesis → reference mapping (−1: unmapped) with the most overlap. */
function bestMapping(overlap: number[][], refs: number): { to: number[]; value: number } {
  const memo = new Map<string, { to: number[]; value: number }>();
  const go = (h: number, used: number): { to: number[]; value: number } => {
    if (h === overlap.length) return { to: [], value: 0 };
    const key = `${h}:${used}`;
    const hit = memo.get(key);
    if (hit) return hit;
    const skip = go(h + 1, used);
    let best = { to: [-1, ...skip.to], value: skip.value };
    for (let r = 0; r < refs; r++) {
      if (used & (1 << r)) continue;
      const rest = go(h + 1, used | (1 << r));
      const value = overlap[h]![r]! + rest.value;
      if (value > best.value) best = { to: [r, ...rest.to], value };
    }
    memo.set(key, best);
    return best;
  };
  return go(0, 0);
}
