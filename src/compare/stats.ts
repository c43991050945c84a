/**
 * The statistics of `compare`, as pure functions: a seeded generator, per-block shuffles,
 * medians and quantiles, paired per-block log ratios, the whole-block bootstrap interval of
 * their median, and the verdict text.
 *
 * The effect of an arm against the baseline is exp(median over blocks of log(arm / baseline)),
 * both runs of a ratio taken from the same block. Its 95 % interval is a percentile bootstrap
 * over whole blocks (10 000 resamples by default), smoothed: each resampled block's log ratio
 * gets Gaussian jitter of standard deviation h = s / √n (s: the smaller of the SD and
 * IQR / 1.349 of the n log ratios). The plain percentile bootstrap of a median is discrete —
 * its resampled medians take only the values of a few order statistics — and its coverage
 * swings with n (0.875 at 7 blocks by exact calculation, 0.93 at the default 15 by
 * simulation, where the 2.5 % point falls on a jump). A jitter of the order of the median's
 * own standard error removes the jumps and costs a factor 1 + 1/n in variance; by simulation
 * (test/compare/stats.test.ts; bench/coverage.mjs, whose table is in docs/compare.md) its
 * coverage is 0.93–0.96 from 6 blocks up, for normal, Laplace and t3 log ratios.
 */

/** xoshiro128** seeded through splitmix32: fast, 32-bit, and the same stream on every platform. */
export class Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  private spare = 0;
  private hasSpare = false;

  constructor(seed: number, stream = 0) {
    let x = (Math.floor(seed) ^ Math.imul(stream + 1, 0x9e3779b9)) >>> 0;
    const hi = Math.floor(seed / 2 ** 32) >>> 0;
    const next = () => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x ^ hi;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    // the state stays int32 (a uint32 above 2^31 would be a heap double in V8)
    this.s0 = next() | 0;
    this.s1 = next() | 0;
    this.s2 = next() | 0;
    this.s3 = next() | 0;
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    const s1 = this.s1;
    const result = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0;
    const t = s1 << 9;
    const s2 = this.s2 ^ this.s0;
    const s3 = this.s3 ^ s1;
    this.s1 = s1 ^ s2;
    this.s0 = this.s0 ^ s3;
    this.s2 = s2 ^ t;
    this.s3 = rotl(s3, 11);
    return result;
  }

  /** Fills `out` with uniform 32-bit unsigned integers (the same stream as u32(), faster). */
  fill(out: Uint32Array): void {
    let s0 = this.s0;
    let s1 = this.s1;
    let s2 = this.s2;
    let s3 = this.s3;
    for (let i = 0; i < out.length; i++) {
      const m = Math.imul(s1, 5);
      out[i] = Math.imul((m << 7) | (m >>> 25), 9);
      const t = s1 << 9;
      s2 ^= s0;
      s3 ^= s1;
      s1 ^= s2;
      s0 ^= s3;
      s2 ^= t;
      s3 = (s3 << 11) | (s3 >>> 21);
    }
    this.s0 = s0;
    this.s1 = s1;
    this.s2 = s2;
    this.s3 = s3;
  }

  /** Uniform in [0, 1) with 53 bits. */
  next(): number {
    return (this.u32() * 2 ** 21 + (this.u32() >>> 11)) / 2 ** 53;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor((this.u32() / 2 ** 32) * n);
  }

  /** Standard normal (both values of each draw used). */
  normal(): number {
    if (this.hasSpare) {
      this.hasSpare = false;
      return this.spare;
    }
    // Marsaglia's polar method on 32-bit uniforms: no trigonometry
    for (;;) {
      const u = (this.u32() + 0.5) / 2 ** 31 - 1;
      const v = (this.u32() + 0.5) / 2 ** 31 - 1;
      const s = u * u + v * v;
      if (s >= 1) continue;
      const f = Math.sqrt((-2 * Math.log(s)) / s);
      this.spare = v * f;
      this.hasSpare = true;
      return u * f;
    }
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** A stream number from a name, so that independent uses of one seed get independent streams. */
export function streamOf(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** A fresh random permutation of `items` (Fisher–Yates). */
export function shuffle<T>(items: readonly T[], rng: Rng): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

function sorted(values: ArrayLike<number>): Float64Array {
  return Float64Array.from(values).sort();
}

/** Median (the mean of the two middle values for an even count); NaN for no values. */
export function median(values: ArrayLike<number>): number {
  return medianSorted(sorted(values));
}

function medianSorted(s: Float64Array): number {
  const n = s.length;
  if (n === 0) return NaN;
  const m = n >> 1;
  return n % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Quantile of sorted values, Hyndman–Fan type 7 (R's default, numpy's linear). */
export function quantileSorted(s: ArrayLike<number>, p: number): number {
  const n = s.length;
  if (n === 0) return NaN;
  const h = (n - 1) * p;
  const lo = Math.floor(h);
  const hi = Math.min(lo + 1, n - 1);
  return s[lo]! + (h - lo) * (s[hi]! - s[lo]!);
}

export function quantile(values: ArrayLike<number>, p: number): number {
  return quantileSorted(sorted(values), p);
}

export function mean(values: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += values[i]!;
  return values.length === 0 ? NaN : sum / values.length;
}

export function standardDeviation(values: ArrayLike<number>): number {
  const n = values.length;
  if (n < 2) return 0;
  const m = mean(values);
  let ss = 0;
  for (let i = 0; i < n; i++) ss += (values[i]! - m) ** 2;
  return Math.sqrt(ss / (n - 1));
}

/** Median, quartiles and extremes of one arm's values of one metric. */
export interface Spread {
  n: number;
  median: number;
  q1: number;
  q3: number;
  min: number;
  max: number;
  /** (q3 − q1) / median; NaN when the median is 0 */
  relIqr: number;
}

export function spread(values: readonly number[]): Spread {
  const s = sorted(values);
  const med = medianSorted(s);
  const q1 = quantileSorted(s, 0.25);
  const q3 = quantileSorted(s, 0.75);
  return {
    n: s.length,
    median: med,
    q1,
    q3,
    min: s.length ? s[0]! : NaN,
    max: s.length ? s[s.length - 1]! : NaN,
    relIqr: med !== 0 ? (q3 - q1) / med : NaN,
  };
}

/**
 * Per-block log ratios log(arm_b / baseline_b) over the blocks where both values are finite
 * and positive (a failed run is null and drops its block from this pair only).
 */
export function logRatios(arm: readonly (number | null)[], baseline: readonly (number | null)[]): number[] {
  const out: number[] = [];
  const n = Math.min(arm.length, baseline.length);
  for (let b = 0; b < n; b++) {
    const x = arm[b];
    const y = baseline[b];
    if (x == null || y == null || !(x > 0) || !(y > 0) || !Number.isFinite(x) || !Number.isFinite(y)) continue;
    out.push(Math.log(x / y));
  }
  return out;
}

export interface BootstrapOptions {
  /** resamples (default 10 000) */
  resamples?: number;
  /** two-sided confidence (default 0.95) */
  confidence?: number;
  /** jitter each resampled value by N(0, h²), h = s/√n (default true); false: the plain percentile bootstrap */
  smooth?: boolean;
}

export interface Interval {
  /** the point estimate: the median of the values */
  estimate: number;
  lower: number;
  upper: number;
  /** the jitter's standard deviation (0 when not smoothed) */
  bandwidth: number;
  n: number;
}

/**
 * The jitter's kernel: the 4096 quantiles Φ⁻¹((i + ½) / 4096) of the standard normal, one
 * picked uniformly per value (a normal discretised to 4096 levels, ±3.5 SD), which costs one
 * 32-bit draw instead of a logarithm and a square root.
 */
const JITTER_BITS = 12;
const JITTER = Float64Array.from({ length: 1 << JITTER_BITS }, (_, i) => normalQuantile((i + 0.5) / (1 << JITTER_BITS)));

/** Φ⁻¹(p), Acklam's rational approximation (relative error < 1.2e-9). */
export function normalQuantile(p: number): number {
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  if (!(p > 0 && p < 1)) return p === 0 ? -Infinity : p === 1 ? Infinity : NaN;
  const lowTail = 0.02425;
  if (p < lowTail || p > 1 - lowTail) {
    const q = Math.sqrt(-2 * Math.log(p < lowTail ? p : 1 - p));
    const x = (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
    return p < lowTail ? x : -x;
  }
  const q = p - 0.5;
  const r = q * q;
  return ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) /
    (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1);
}

/** The bandwidth h = s / √n, s = min(SD, IQR / 1.349) (the SD when the IQR is 0). */
export function bandwidth(values: readonly number[]): number {
  const n = values.length;
  if (n < 2) return 0;
  const sd = standardDeviation(values);
  const iqr = quantile(values, 0.75) - quantile(values, 0.25);
  const s = iqr > 0 ? Math.min(sd, iqr / 1.349) : sd;
  return s / Math.sqrt(n);
}

/**
 * The bootstrap distribution of the median of `values` (one value per block: resampling
 * values is resampling whole blocks), smoothed with bandwidth h (0: plain), sorted.
 */
export function bootstrapMedians(values: readonly number[], rng: Rng, resamples: number, h: number): Float64Array {
  const n = values.length;
  const x = Float64Array.from(values);
  const buf = new Float64Array(n);
  const medians = new Float64Array(resamples);
  if (n === 0) return medians.fill(NaN);
  const half = n >> 1;
  const draws = new Uint32Array(2 * n);
  for (let r = 0; r < resamples; r++) {
    rng.fill(draws);
    for (let i = 0; i < n; i++) {
      const v = x[Math.floor((draws[2 * i]! / 2 ** 32) * n)]!;
      buf[i] = h > 0 ? v + h * JITTER[draws[2 * i + 1]! >>> (32 - JITTER_BITS)]! : v;
    }
    // insertion sort: n is small (blocks)
    for (let i = 1; i < n; i++) {
      const v = buf[i]!;
      let j = i - 1;
      while (j >= 0 && buf[j]! > v) {
        buf[j + 1] = buf[j]!;
        j--;
      }
      buf[j + 1] = v;
    }
    medians[r] = n % 2 === 1 ? buf[half]! : (buf[half - 1]! + buf[half]!) / 2;
  }
  return medians.sort();
}

/** The two-sided percentile interval at `confidence` of a sorted bootstrap distribution. */
export function percentileInterval(sortedMedians: Float64Array, confidence: number): { lower: number; upper: number } {
  const alpha = (1 - confidence) / 2;
  return { lower: quantileSorted(sortedMedians, alpha), upper: quantileSorted(sortedMedians, 1 - alpha) };
}

/**
 * Percentile bootstrap interval of the median of `values` over whole blocks, smoothed by
 * default (see the head of this file).
 */
export function bootstrapMedian(values: readonly number[], rng: Rng, opts: BootstrapOptions = {}): Interval {
  const n = values.length;
  const estimate = median(values);
  if (n === 0) return { estimate: NaN, lower: NaN, upper: NaN, bandwidth: 0, n };
  const h = opts.smooth === false ? 0 : bandwidth(values);
  const medians = bootstrapMedians(values, rng, opts.resamples ?? 10_000, h);
  return { estimate, ...percentileInterval(medians, opts.confidence ?? 0.95), bandwidth: h, n };
}

/**
 * The fewest blocks from which the interval carries a verdict. Below it the smoothed bootstrap
 * of a median covers far less than it claims (a 95 % interval of 2 blocks covers about 63 %,
 * of 3 about 84 %, of 4 about 86–90 %: it spans little more than the observed block ratios, so
 * any consistent sign reads as an effect); from 5 blocks up it covers 0.93–0.96 for normal,
 * Laplace and t3 log ratios. test/compare/stats.test.ts derives this number by simulation and
 * fails when it changes (docs/compare.md has the table).
 */
export const MIN_VERDICT_BLOCKS = 5;

/** What `compare` says instead of a verdict below MIN_VERDICT_BLOCKS. */
export const NOT_ENOUGH_BLOCKS = `not enough blocks for a verdict (at least ${MIN_VERDICT_BLOCKS})`;

/** What a metric is, for words: time (faster/slower), memory (less/more), a count (fewer/more). */
export type MetricKind = 'time' | 'memory' | 'count';

export interface Effect {
  /** exp(median per-block log ratio): arm / baseline */
  ratio: number;
  lower: number;
  upper: number;
  /** blocks that entered (both runs succeeded, values positive) */
  n: number;
  /** the interval excludes 1, from at least MIN_VERDICT_BLOCKS blocks (below: always false) */
  significant: boolean;
  /** n >= MIN_VERDICT_BLOCKS: the interval is valid for a verdict */
  enough: boolean;
  /** lower/higher than the baseline, when significant */
  direction: 'lower' | 'higher' | 'none';
  verdict: string;
}

/** The effect of an arm against the baseline from their per-block values (null: a failed run). */
export function effect(
  arm: readonly (number | null)[],
  baseline: readonly (number | null)[],
  kind: MetricKind,
  rng: Rng,
  opts: BootstrapOptions = {},
): Effect | null {
  const r = logRatios(arm, baseline);
  if (r.length < 2) return null;
  const iv = bootstrapMedian(r, rng, opts);
  const ratio = Math.exp(iv.estimate);
  const lower = Math.exp(iv.lower);
  const upper = Math.exp(iv.upper);
  // below MIN_VERDICT_BLOCKS the interval is shown, but claims nothing
  const enough = r.length >= MIN_VERDICT_BLOCKS;
  const significant = enough && (lower > 1 || upper < 1);
  const direction = !significant ? 'none' : upper < 1 ? 'lower' : 'higher';
  return { ratio, lower, upper, n: r.length, significant, enough, direction, verdict: enough ? verdictText(ratio, lower, upper, kind) : NOT_ENOUGH_BLOCKS };
}

const WORDS: Record<MetricKind, { lower: string; higher: string }> = {
  time: { lower: 'faster', higher: 'slower' },
  memory: { lower: 'less memory', higher: 'more memory' },
  count: { lower: 'fewer', higher: 'more' },
};

/** A percentage: one decimal under 10 %, none above. */
export function percent(x: number): string {
  const p = Math.abs(x) * 100;
  return `${p < 9.95 ? p.toFixed(1) : p.toFixed(0)} %`;
}

/**
 * "faster by 12 % [8 %, 15 %]" when the interval lies below 1, "slower by …" above it (with
 * the words of the metric's kind), "no difference detected" when it contains 1.
 */
export function verdictText(ratio: number, lower: number, upper: number, kind: MetricKind): string {
  const w = WORDS[kind];
  if (upper < 1) return `${w.lower} by ${percent(1 - ratio)} [${percent(1 - upper)}, ${percent(1 - lower)}]`;
  if (lower > 1) return `${w.higher} by ${percent(ratio - 1)} [${percent(lower - 1)}, ${percent(upper - 1)}]`;
  return 'no difference detected';
}

/** log of the binomial pmf, for the tolerance of coverage simulations. */
function logBinomPmf(k: number, n: number, p: number): number {
  let lc = 0;
  for (let i = 1; i <= k; i++) lc += Math.log((n - k + i) / i);
  return lc + k * Math.log(p) + (n - k) * Math.log(1 - p);
}

/**
 * The two-sided acceptance region of a Binomial(n, p) count at level alpha: the smallest lo
 * and largest hi with P(X < lo) ≤ alpha/2 and P(X > hi) ≤ alpha/2.
 */
export function binomialAcceptance(n: number, p: number, alpha: number): { lo: number; hi: number } {
  const pmf = Array.from({ length: n + 1 }, (_, k) => Math.exp(logBinomPmf(k, n, p)));
  let lo = 0;
  let tail = 0;
  while (lo <= n && tail + pmf[lo]! <= alpha / 2) tail += pmf[lo++]!;
  let hi = n;
  tail = 0;
  while (hi >= 0 && tail + pmf[hi]! <= alpha / 2) tail += pmf[hi--]!;
  return { lo, hi };
}
