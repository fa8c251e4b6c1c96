/** How many clusters (domain/diarization/diarize.ts passes the request's speaker count). */
export interface ClusterBounds {
  /** Stop at exactly this many clusters (when there are at least as many items). */
  exact?: number;
  /** Never fewer / more clusters than these (when there are enough items). */
  min?: number;
  max?: number;
  /** The BIC penalty's weight (λ); without `exact`, merging stops when every merge would raise the BIC. */
  threshold: number;
  /** Per frame, the merge allowance never falls below this (0: plain BIC). */
  glrFloor?: number;
}

/** One merge, in order: the linkage distance it was made at and the count left after it. */
interface Merge {
  distance: number;
  clusters: number;
}

export interface Clustering {
  /** Cluster of each item, 0..k-1 in order of each cluster's first item. */
  labels: number[];
  merges: Merge[];
}

/** A Gaussian's sufficient statistics: count, sums and sums of products of `dims`-vectors. */
export interface GaussianStats {
  n: number;
  sum: Float64Array;
  /** Sums of x_a·x_b, a ≤ b, in a dims × dims row-major array (the lower triangle unused). */
  outer: Float64Array;
}

export function statsOf(z: Float32Array, dims: number, from: number, to: number): GaussianStats {
  const sum = new Float64Array(dims);
  const outer = new Float64Array(dims * dims);
  for (let i = from; i < to; i++) {
    const o = i * dims;
    for (let a = 0; a < dims; a++) {
      const x = z[o + a]!;
      sum[a] = sum[a]! + x;
      for (let b = a; b < dims; b++) outer[a * dims + b] = outer[a * dims + b]! + x * z[o + b]!;
    }
  }
  return { n: to - from, sum, outer };
}

export function sumStats(p: GaussianStats, q: GaussianStats): GaussianStats {
  return { n: p.n + q.n, sum: p.sum.map((v, i) => v + q.sum[i]!), outer: p.outer.map((v, i) => v + q.outer[i]!) };
}

/** log |Σ| of the stats' full-covariance Gaussian (Cholesky; a small ridge keeps it finite). */
export function logDetCovariance(s: GaussianStats, dims: number, ridge = 0.01): number {
  const c = new Float64Array(dims * dims);
  for (let a = 0; a < dims; a++) {
    const ma = s.sum[a]! / s.n;
    for (let b = a; b < dims; b++) {
      const v = s.outer[a * dims + b]! / s.n - ma * (s.sum[b]! / s.n);
      c[a * dims + b] = c[b * dims + a] = v + (a === b ? ridge : 0);
    }
  }
  let logDet = 0;
  for (let j = 0; j < dims; j++) {
    let d = c[j * dims + j]!;
    for (let k = 0; k < j; k++) d -= c[j * dims + k]! ** 2;
    d = Math.max(d, 1e-9);
    const l = Math.sqrt(d);
    c[j * dims + j] = l;
    logDet += 2 * Math.log(l);
    for (let i = j + 1; i < dims; i++) {
      let v = c[i * dims + j]!;
      for (let k = 0; k < j; k++) v -= c[i * dims + k]! * c[j * dims + k]!;
      c[i * dims + j] = v / l;
    }
  }
  return logDet;
}

/**
 * Agglomerative clustering by the Bayesian information criterion (Chen & Gopalakrishnan
 * 1998), full-covariance Gaussians: the pair whose merge costs least is merged, each
 * cluster's Gaussian re-estimated from the pooled frames. Without `exact` it stops when
 * every merge would raise the BIC (ΔBIC > 0 at penalty weight `threshold`), within
 * min..max. Pure; O(n²) log-determinants and O(n³) comparisons, so callers bound n.
 */
export function clusterBic(items: readonly GaussianStats[], dims: number, bounds: ClusterBounds): Clustering {
  const n = items.length;
  if (n === 0) return { labels: [], merges: [] };
  const total = items.reduce((a, s) => a + s.n, 0);
  const penalty = 0.5 * (dims + (dims * (dims + 1)) / 2) * Math.log(total) * bounds.threshold;
  const stats: (GaussianStats | undefined)[] = [...items];
  const logDet = items.map((s) => logDetCovariance(s, dims));
  const parent = Array.from({ length: n }, (_, i) => i);
  const delta = new Float64Array(n * n);
  const key = (i: number, j: number) => (i < j ? i * n + j : j * n + i);
  const floor = bounds.glrFloor ?? 0;
  const deltaOf = (i: number, j: number) => {
    const m = sumStats(stats[i]!, stats[j]!);
    const glr = 0.5 * (m.n * logDetCovariance(m, dims) - stats[i]!.n * logDet[i]! - stats[j]!.n * logDet[j]!);
    // per frame, the penalty is at least `floor`: big clusters of one voice still merge
    return glr / m.n - Math.max(floor, penalty / m.n);
  };
  for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) delta[key(i, j)] = deltaOf(i, j);
  const lo = Math.min(bounds.exact ?? bounds.min ?? 1, n);
  const hi = Math.max(1, Math.min(bounds.exact ?? bounds.max ?? n, n));
  const merges: Merge[] = [];
  let clusters = n;
  while (clusters > lo) {
    let best = Infinity;
    let pair = [-1, -1];
    for (let i = 0; i < n; i++) {
      if (!stats[i]) continue;
      for (let j = i + 1; j < n; j++) if (stats[j] && delta[i * n + j]! < best) [best, pair] = [delta[i * n + j]!, [i, j]];
    }
    const [a, b] = pair as [number, number];
    if (a < 0) break;
    if (clusters <= hi && bounds.exact === undefined && best > 0) break;
    stats[a] = sumStats(stats[a]!, stats[b]!);
    logDet[a] = logDetCovariance(stats[a]!, dims);
    stats[b] = undefined;
    parent[b] = a;
    clusters--;
    merges.push({ distance: best, clusters });
    for (let k = 0; k < n; k++) if (stats[k] && k !== a) delta[key(a, k)] = deltaOf(a, k);
  }
  const root = (i: number): number => (parent[i] === i ? i : (parent[i] = root(parent[i]!)));
  const ids = new Map<number, number>();
  const labels = Array.from({ length: n }, (_, i) => {
    const r = root(i);
    if (!ids.has(r)) ids.set(r, ids.size);
    return ids.get(r)!;
  });
  return { labels, merges };
}
