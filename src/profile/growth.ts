/**
 * growth: which functions' in-use memory grows, over profiles of one process in time order,
 * telling growth from sampling noise.
 *
 * Per profile and function (cumulative, each function once per sample, as `top`): the
 * estimate Y and its sampling variance V. A sample row of a sampled heap profile estimates
 * count × size from n = count · q sampled blocks, q = 1 − e^(−size/period), each weighted 1/q,
 * so its Horvitz–Thompson variance is count · q · size² (1 − q) / q² (size: the row's mean
 * block size); rows are independent within a profile, so a function's V is the sum over its
 * rows.
 *
 * The slope is the least-squares one, b = Σ cᵢ Yᵢ with cᵢ = (tᵢ − t̄) / Σ (tⱼ − t̄)². The
 * profiles of one process share sampled blocks (a block sampled once stays in every later
 * profile while it lives), so the Yᵢ are correlated. Written over the steps between
 * profiles, b = Σₖ dₖ (Yₖ − Yₖ₋₁) with dₖ = Σ_{i≥k} cᵢ ≥ 0: a block contributes its weight
 * times (d at its allocation − d at its free), so a block alive through every profile adds
 * nothing, and since both d are ≥ 0, Var(b) ≤ Σₖ dₖ² (Aₖ + Fₖ), where Aₖ is the sampling
 * variance of the blocks allocated in step k and Fₖ that of the blocks freed in it. With the
 * allocated figures (alloc_space, alloc_objects: every profile of `run`, the handler and
 * startDumps has them) Aₖ is the growth of the allocated estimate's variance over the step
 * (an upper bound: it includes blocks allocated and freed within the step) and
 * Fₖ = max(0, Vₖ₋₁ + Aₖ − Vₖ). Without them, whatever the correlations,
 * sd(b) ≤ Σ |cᵢ| √Vᵢ (Cauchy–Schwarz), a wider bound. Growth that is real but not linear (a
 * cache that fills and drains) shows in the residuals: with three profiles or more, the
 * interval is the wider of the sampling one (z = 1.96) and the regression's own t-interval.
 * A function is significant when the whole interval is above 0.
 */
import { ProfileMismatchError } from '../errors.js';
import { canonical, frameNames, indexProfile, str, toNum, type Profile } from './model.js';

export interface GrowthRow {
  name: string;
  /** Least-squares slope of the function's cumulative in-use figure, per second. */
  bytesPerSecond: number;
  /** The interval (95 % by default) around it. */
  low: number;
  high: number;
  /** low > 0: it grows by more than sampling noise and the fit's scatter explain. */
  significant: boolean;
  /** Its figure in the first and the last profile. */
  first: number;
  last: number;
}

export interface GrowthResult {
  /** Seconds since the first profile, per profile. */
  times: number[];
  /** The in-use total per profile. */
  totals: number[];
  sampleType: string;
  unit: string;
  /** Every function, fastest growth first. */
  functions: GrowthRow[];
}

/** Two-sided 97.5 % quantiles of Student's t for 1…30 degrees of freedom. */
const T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069, 2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042];
const Z975 = 1.959964;

interface PerFunction {
  cum: Map<string, number>;
  variance: Map<string, number>;
  /** The sampling variance of the allocated figure (undefined without alloc_* types). */
  allocVariance: Map<string, number> | undefined;
  total: number;
}

/** Horvitz–Thompson variance of a row estimating `count` blocks totalling `bytes`. */
export function rowVariance(bytes: number, count: number, period: number): number {
  if (!(period > 0 && count > 0 && bytes > 0)) return 0;
  const size = bytes / count;
  const q = -Math.expm1(-size / period);
  return (count * q * size * size * (1 - q)) / (q * q);
}

/** Cumulative estimate and sampling variances per function, for one profile. */
function perFunction(p: Profile, space: number, objects: number, alloc: [number, number] | undefined): PerFunction {
  const ix = indexProfile(p);
  const period = toNum(p.period);
  const cum = new Map<string, number>();
  const variance = new Map<string, number>();
  const allocVariance = alloc ? new Map<string, number>() : undefined;
  const names = new Map<string, string[]>();
  const seen = new Set<string>();
  let total = 0;
  for (const s of p.sample) {
    const y = toNum(s.value[space]!);
    const av = alloc ? rowVariance(toNum(s.value[alloc[0]]!), toNum(s.value[alloc[1]]!), period) : 0;
    if (y === 0 && av === 0) continue;
    total += y;
    const v = rowVariance(y, objects >= 0 ? toNum(s.value[objects]!) : 0, period);
    seen.clear();
    for (const id of s.locationId) {
      const key = String(canonical(id));
      let fr = names.get(key);
      if (!fr) names.set(key, (fr = frameNames(ix, ix.locations.get(canonical(id))!)));
      for (const name of fr) {
        if (seen.has(name)) continue;
        seen.add(name);
        cum.set(name, (cum.get(name) ?? 0) + y);
        variance.set(name, (variance.get(name) ?? 0) + v);
        if (allocVariance) allocVariance.set(name, (allocVariance.get(name) ?? 0) + av);
      }
    }
  }
  return { cum, variance, allocVariance, total };
}

/**
 * Growth over `profiles` (any order: they are put in the order of their timeNanos, which
 * must differ). Throws ProfileMismatchError when there are fewer than two, when their times
 * are missing or equal, or when one lacks the sample type.
 */
export function growth(profiles: { profile: Profile; name: string }[], sampleType = 'inuse_space'): GrowthResult {
  if (profiles.length < 2) throw new ProfileMismatchError('growth needs at least two profiles of one process');
  const timed = profiles.map((x) => ({ ...x, t: toNum(x.profile.timeNanos) / 1e9 }));
  for (const x of timed) if (!(x.t > 0)) throw new ProfileMismatchError(`${x.name} has no time (timeNanos): growth needs to know when each profile was taken`);
  timed.sort((a, b) => a.t - b.t);
  for (let i = 1; i < timed.length; i++) {
    if (timed[i]!.t === timed[i - 1]!.t) throw new ProfileMismatchError(`${timed[i - 1]!.name} and ${timed[i]!.name} were taken at the same time`);
  }
  let unit = '';
  const per = timed.map(({ profile: p, name }) => {
    const types = p.sampleType.map((t) => str(p, t.type));
    const space = types.indexOf(sampleType);
    if (space < 0) throw new ProfileMismatchError(`${name} has no ${sampleType} sample type (it has ${types.join(', ')})`);
    unit ||= str(p, p.sampleType[space]!.unit);
    const objectsName = sampleType.replace(/_space$/, '_objects');
    const allocSpace = types.indexOf(sampleType.replace(/^inuse_/, 'alloc_'));
    const allocObjects = types.indexOf(objectsName.replace(/^inuse_/, 'alloc_'));
    const alloc: [number, number] | undefined = sampleType === 'inuse_space' && allocSpace >= 0 && allocObjects >= 0 ? [allocSpace, allocObjects] : undefined;
    return perFunction(p, space, objectsName !== sampleType ? types.indexOf(objectsName) : -1, alloc);
  });
  const times = timed.map((x) => x.t - timed[0]!.t);
  const n = times.length;
  const tMean = times.reduce((a, b) => a + b, 0) / n;
  const sxx = times.reduce((a, t) => a + (t - tMean) ** 2, 0);
  const c = times.map((t) => (t - tMean) / sxx);
  // d[k] = Σ_{i≥k} c[i], the weight of step k (from profile k − 1 to k)
  const d = c.map((_, k) => c.slice(k).reduce((a, b) => a + b, 0));
  const withAlloc = per.every((f) => f.allocVariance !== undefined);
  const names = new Set<string>();
  for (const f of per) for (const k of f.cum.keys()) names.add(k);
  const functions: GrowthRow[] = [];
  for (const name of names) {
    const y = per.map((f) => f.cum.get(name) ?? 0);
    const sd = per.map((f) => Math.sqrt(f.variance.get(name) ?? 0));
    const slope = c.reduce((a, ci, i) => a + ci * y[i]!, 0);
    let sampling = c.reduce((a, ci, i) => a + Math.abs(ci) * sd[i]!, 0);
    if (withAlloc) {
      const v = per.map((f) => f.variance.get(name) ?? 0);
      const av = per.map((f) => f.allocVariance!.get(name) ?? 0);
      let steps = 0;
      let usable = true;
      for (let k = 1; k < n; k++) {
        const allocated = av[k]! - av[k - 1]!;
        if (allocated < 0) usable = false; // reset or restarted in between: no step figures
        const a = Math.max(0, allocated);
        const freed = Math.max(0, v[k - 1]! + a - v[k]!);
        steps += d[k]! ** 2 * (a + freed);
      }
      if (usable) sampling = Math.min(sampling, Math.sqrt(steps));
    }
    let half = Z975 * sampling;
    if (n >= 3) {
      const yMean = y.reduce((a, b) => a + b, 0) / n;
      const intercept = yMean - slope * tMean;
      const rss = y.reduce((a, yi, i) => a + (yi - intercept - slope * times[i]!) ** 2, 0);
      const se = Math.sqrt(rss / (n - 2) / sxx);
      half = Math.max(half, (T975[n - 3] ?? Z975) * se);
    }
    functions.push({ name, bytesPerSecond: slope, low: slope - half, high: slope + half, significant: slope - half > 0, first: y[0]!, last: y[n - 1]! });
  }
  functions.sort((a, b) => b.bytesPerSecond - a.bytesPerSecond || (a.name < b.name ? -1 : 1));
  return { times, totals: per.map((f) => f.total), sampleType, unit, functions };
}
