/** compare's statistics (src/compare/stats.ts): the pure functions, and the coverage of the
 * bootstrap interval by simulation (acceptance 2). */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  bandwidth,
  binomialAcceptance,
  bootstrapMedian,
  bootstrapMedians,
  effect,
  logRatios,
  median,
  MIN_VERDICT_BLOCKS,
  normalQuantile,
  percent,
  percentileInterval,
  quantile,
  Rng,
  shuffle,
  spread,
  streamOf,
  verdictText,
} from '../../src/compare/stats.js';

test('median, type-7 quantiles and spread', () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.ok(Number.isNaN(median([])));
  // R: quantile(c(1,2,3,4,10), c(.25,.9)) = 2, 7.6
  assert.equal(quantile([10, 1, 3, 2, 4], 0.25), 2);
  assert.ok(Math.abs(quantile([10, 1, 3, 2, 4], 0.9) - 7.6) < 1e-12);
  const s = spread([1, 2, 3, 4, 10]);
  assert.deepEqual([s.n, s.median, s.q1, s.q3, s.min, s.max], [5, 3, 2, 4, 1, 10]);
  assert.ok(Math.abs(s.relIqr - 2 / 3) < 1e-12);
});

test('Rng: seeded, independent streams, uniform integers, standard normals', () => {
  const a = new Rng(42, 1);
  const b = new Rng(42, 1);
  const c = new Rng(42, 2);
  const xs = Array.from({ length: 8 }, () => a.u32());
  assert.deepEqual(xs, Array.from({ length: 8 }, () => b.u32()));
  assert.notDeepEqual(xs, Array.from({ length: 8 }, () => c.u32()));
  // fill() continues the same stream as u32()
  const d = new Rng(9);
  const e = new Rng(9);
  const filled = new Uint32Array(5);
  d.fill(filled);
  assert.deepEqual([...filled], Array.from({ length: 5 }, () => e.u32()));
  assert.equal(d.u32(), e.u32());
  assert.notEqual(streamOf('a/b/cpu'), streamOf('a/b/wall'));

  // 60 000 draws in 6 cells: chi-square with 5 degrees of freedom, 99.9 % point 20.5
  const r = new Rng(1);
  const counts = new Array(6).fill(0);
  for (let i = 0; i < 60_000; i++) counts[r.int(6)]++;
  const chi = counts.reduce((s, k) => s + (k - 10_000) ** 2 / 10_000, 0);
  assert.ok(chi < 20.5, `chi-square ${chi.toFixed(1)} over ${counts.join(', ')}`);

  let sum = 0;
  let sum2 = 0;
  const n = 100_000;
  for (let i = 0; i < n; i++) {
    const z = r.normal();
    sum += z;
    sum2 += z * z;
  }
  // mean within 4 SE (4/√n = 0.0126), variance within 4 SE (4·√(2/n) = 0.018)
  assert.ok(Math.abs(sum / n) < 0.0127, `mean ${sum / n}`);
  assert.ok(Math.abs(sum2 / n - 1) < 0.018, `variance ${sum2 / n}`);
  assert.ok(Math.abs(normalQuantile(0.975) - 1.959963985) < 1e-8);
  assert.ok(Math.abs(normalQuantile(0.5)) < 1e-12);
});

test('shuffle: permutations, each arm equally often in each place', () => {
  const arms = ['glibc', 'mimalloc', 'jemalloc', 'tcmalloc'];
  const r = new Rng(3);
  const place = new Map(arms.map((a) => [a, [0, 0, 0, 0]]));
  const blocks = 8000;
  for (let b = 0; b < blocks; b++) {
    const order = shuffle(arms, r);
    assert.deepEqual([...order].sort(), [...arms].sort());
    order.forEach((a, i) => place.get(a)![i]!++);
  }
  // each cell ~ Binomial(8000, 1/4): mean 2000, SD 38.7; 4.5 SD = 174
  for (const [a, counts] of place) for (const k of counts) assert.ok(Math.abs(k - 2000) < 174, `${a}: ${counts.join(', ')}`);
  assert.deepEqual(shuffle(arms, new Rng(5)), shuffle(arms, new Rng(5)), 'seeded');
});

test('logRatios pair by block and drop failed runs and non-positive values', () => {
  const r = logRatios([2, null, 3, 0, 8], [1, 1, null, 1, 2]);
  assert.deepEqual(r, [Math.log(2), Math.log(4)]);
});

test('bootstrapMedian: seeded, brackets the estimate, degenerate data give a point', () => {
  const x = [0.1, -0.2, 0.05, 0.3, 0.12, -0.01, 0.2, 0.15];
  const a = bootstrapMedian(x, new Rng(11), { resamples: 2000 });
  const b = bootstrapMedian(x, new Rng(11), { resamples: 2000 });
  assert.deepEqual(a, b);
  assert.ok(a.lower <= a.estimate && a.estimate <= a.upper, JSON.stringify(a));
  assert.equal(a.estimate, median(x));
  assert.ok(a.bandwidth > 0 && Math.abs(a.bandwidth - bandwidth(x)) < 1e-15);
  const flat = bootstrapMedian([0.5, 0.5, 0.5, 0.5], new Rng(1), { resamples: 500 });
  assert.deepEqual([flat.lower, flat.estimate, flat.upper], [0.5, 0.5, 0.5]);
  const plain = bootstrapMedian(x, new Rng(11), { resamples: 2000, smooth: false });
  assert.equal(plain.bandwidth, 0);
  assert.ok(x.includes(plain.lower) || plain.lower < Math.max(...x), 'plain: values of the data');
});

test('verdict text: faster/slower by p % [lo, hi] only when the interval excludes 1', () => {
  assert.equal(verdictText(0.88, 0.85, 0.92, 'time'), 'faster by 12 % [8.0 %, 15 %]');
  assert.equal(verdictText(2, 1.8, 2.2, 'time'), 'slower by 100 % [80 %, 120 %]');
  assert.equal(verdictText(1.05, 1.01, 1.1, 'memory'), 'more memory by 5.0 % [1.0 %, 10 %]');
  assert.equal(verdictText(0.9, 0.8, 0.95, 'count'), 'fewer by 10 % [5.0 %, 20 %]');
  assert.equal(verdictText(0.97, 0.93, 1.01, 'time'), 'no difference detected');
  assert.equal(verdictText(1, 1, 1, 'time'), 'no difference detected');
  assert.equal(percent(0.0049), '0.5 %');
});

test('effect: exp(median per-block log ratio) with its interval', () => {
  const base = [1, 1.2, 0.9, 1.1, 1.0, 1.3, 0.95, 1.05];
  const arm = base.map((x, i) => x * 0.8 * (i % 2 ? 1.02 : 1 / 1.02));
  const e = effect(arm, base, 'time', new Rng(1), { resamples: 4000 })!;
  assert.ok(Math.abs(e.ratio - 0.8) < 1e-9, `ratio ${e.ratio}`);
  assert.ok(e.significant && e.direction === 'lower' && e.upper < 1);
  assert.match(e.verdict, /^faster by 20 % \[/);
  assert.equal(e.n, 8);
  assert.equal(effect([1, null], [1, 1], 'time', new Rng(1)), null, 'fewer than 2 blocks: no effect');
});

test('binomial acceptance region', () => {
  const { lo, hi } = binomialAcceptance(1000, 0.95, 0.001);
  // normal approximation: 950 ± 3.29 · 6.89 = [927.3, 972.7]
  assert.ok(lo >= 925 && lo <= 930 && hi >= 970 && hi <= 975, `${lo}..${hi}`);
  const small = binomialAcceptance(20, 0.5, 0.05);
  // P(X ≤ 5) = 0.0207 ≤ 0.025 < P(X ≤ 6) = 0.0577: accept 6..14
  assert.deepEqual(small, { lo: 6, hi: 14 });
});

/**
 * Acceptance 2. 1 000 simulated experiments of 15 blocks (the default) from a known
 * log-normal model: block b has a load factor L_b = exp(0.3 Z_b) shared by both arms; the
 * baseline's run costs 1.2 s · L_b · exp(0.05 Z), the arm's θ · 1.2 s · L_b · exp(0.05 Z′),
 * θ = 0.88. The per-block log ratio is log θ + 0.05 (Z′ − Z), symmetric about log θ, so the
 * true effect (exp of the median log ratio) is θ. Each experiment gets the interval compare
 * reports (10 000 whole-block resamples, smoothed); the count that contain θ must lie in the
 * 99.9 % acceptance region of Binomial(1000, 0.95), 926..971 (0.926–0.971): outside it,
 * "95 %" would be wrong with 99.9 % confidence. Its positive control: the 90 % intervals of
 * the same resamples, passed off as 95 %, must be rejected by the same region.
 */
test('coverage of the 95 % bootstrap interval: 1 000 simulated experiments', { timeout: 120_000 }, (t) => {
  const experiments = 1000;
  const blocks = 15;
  const theta = 0.88;
  const sim = new Rng(20261130, streamOf('simulation'));
  const boot = new Rng(20261130, streamOf('bootstrap'));
  let covered95 = 0;
  let covered90 = 0;
  let excludes1 = 0;
  for (let e = 0; e < experiments; e++) {
    const base: number[] = [];
    const arm: number[] = [];
    for (let b = 0; b < blocks; b++) {
      const load = Math.exp(0.3 * sim.normal());
      base.push(1.2 * load * Math.exp(0.05 * sim.normal()));
      arm.push(theta * 1.2 * load * Math.exp(0.05 * sim.normal()));
    }
    const r = logRatios(arm, base);
    const medians = bootstrapMedians(r, boot, 10_000, bandwidth(r));
    const i95 = percentileInterval(medians, 0.95);
    const i90 = percentileInterval(medians, 0.9);
    if (Math.exp(i95.lower) <= theta && theta <= Math.exp(i95.upper)) covered95++;
    if (Math.exp(i90.lower) <= theta && theta <= Math.exp(i90.upper)) covered90++;
    if (Math.exp(i95.upper) < 1) excludes1++;
  }
  const { lo, hi } = binomialAcceptance(experiments, 0.95, 0.001);
  t.diagnostic(`coverage of the 95 % interval: ${covered95}/${experiments} = ${(covered95 / experiments).toFixed(3)} (accepted: ${lo}..${hi})`);
  t.diagnostic(`positive control, 90 % interval: ${covered90}/${experiments}; power against 1 (θ = ${theta}): ${excludes1}/${experiments}`);
  assert.ok(covered95 >= lo && covered95 <= hi, `95 % interval covered θ in ${covered95} of ${experiments} experiments, outside ${lo}..${hi}`);
  assert.ok(covered90 < lo, `the gate must reject a 90 % interval (it covered ${covered90})`);
  assert.ok(excludes1 > 0.99 * experiments, `a 12 % effect with 5 % noise is detected (${excludes1})`);
});

/**
 * The fewest blocks for a verdict (issue 29, 8), derived by simulation: for n = 2…8 blocks and
 * three shapes of per-block log ratio (normal, Laplace, t with 3 df; known effect 0.88), the
 * share of 800 experiments whose 95 % interval (as compare computes it, 2 000 resamples) covers
 * it. K is the smallest n from which every n up to 8, every shape, covers at least 0.93 less
 * two Monte Carlo standard errors (≈ 0.912): it must be MIN_VERDICT_BLOCKS. The control: at 2
 * blocks the coverage is far below (under 0.75), so the check can tell a bad n from a good one.
 */
test('the minimum number of blocks for a verdict, by coverage simulation', { timeout: 80_000 }, (t) => {
  const experiments = 800;
  const theta = Math.log(0.88);
  const shapes: Record<string, (r: Rng) => number> = {
    normal: (r) => r.normal(),
    laplace: (r) => {
      const u = r.u32() / 2 ** 32 - 0.5;
      return (-Math.sign(u) * Math.log(1 - 2 * Math.abs(u))) / Math.SQRT2;
    },
    t3: (r) => {
      const z = r.normal();
      let c = 0;
      for (let i = 0; i < 3; i++) c += r.normal() ** 2;
      return z / Math.sqrt(c / 3);
    },
  };
  const ns = [2, 3, 4, 5, 6, 7, 8];
  const coverage = new Map<number, number>(); // the worst over shapes
  for (const n of ns) {
    let worst = 1;
    for (const [name, draw] of Object.entries(shapes)) {
      const sim = new Rng(20261204, streamOf(`sim/${name}/${n}`));
      const boot = new Rng(20261204, streamOf(`boot/${name}/${n}`));
      let covered = 0;
      for (let e = 0; e < experiments; e++) {
        const r = Array.from({ length: n }, () => theta + 0.05 * draw(sim));
        const iv = percentileInterval(bootstrapMedians(r, boot, 2000, bandwidth(r)), 0.95);
        if (iv.lower <= theta && theta <= iv.upper) covered++;
      }
      worst = Math.min(worst, covered / experiments);
    }
    coverage.set(n, worst);
  }
  t.diagnostic(`worst coverage over normal, Laplace, t3: ${ns.map((n) => `n=${n} ${coverage.get(n)!.toFixed(3)}`).join(', ')}`);
  const floor = 0.93 - 2 * Math.sqrt((0.93 * 0.07) / experiments);
  const k = ns.find((n) => ns.filter((m) => m >= n).every((m) => coverage.get(m)! >= floor));
  t.diagnostic(`floor ${floor.toFixed(3)}: minimum blocks for a verdict ${k}`);
  assert.equal(k, MIN_VERDICT_BLOCKS);
  // control: the check sees how badly 2 blocks cover
  assert.ok(coverage.get(2)! < 0.75, `2 blocks covered ${coverage.get(2)}`);
  assert.ok(coverage.get(MIN_VERDICT_BLOCKS - 1)! < floor);
});
