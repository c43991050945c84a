#!/usr/bin/env node
// Coverage of compare's 95 % bootstrap interval by simulation, across block counts and
// distributions of the per-block log ratios, for the smoothed bootstrap compare uses and the
// plain percentile bootstrap (the table in docs/compare.md). Needs the build (npm run prepare).
//
//   node bench/coverage.mjs [--experiments=N] [--resamples=N] [--markdown]
import { bandwidth, bootstrapMedians, percentileInterval, Rng, streamOf } from '../dist/src/compare/stats.js';

const arg = (name, dflt) => Number(process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt);
const experiments = arg('experiments', 1000);
const resamples = arg('resamples', 10000);
const markdown = process.argv.includes('--markdown');
const sizes = [6, 8, 10, 15, 20, 30];
const dists = {
  normal: (r) => r.normal(),
  'Laplace': (r) => {
    const u = r.next() - 0.5;
    return -Math.sign(u) * Math.log(1 - 2 * Math.abs(u));
  },
  't (3 df)': (r) => {
    let c = 0;
    for (let i = 0; i < 3; i++) c += r.normal() ** 2;
    return r.normal() / Math.sqrt(c / 3);
  },
};
const rows = [];
for (const [name, draw] of Object.entries(dists)) {
  for (const smooth of [true, false]) {
    const cells = [];
    for (const n of sizes) {
      const sim = new Rng(1, streamOf(`${name}/${n}`));
      const boot = new Rng(2, streamOf(`${name}/${n}/${smooth}`));
      let covered = 0;
      for (let e = 0; e < experiments; e++) {
        const x = Array.from({ length: n }, () => 0.05 * draw(sim)); // true median 0
        const iv = percentileInterval(bootstrapMedians(x, boot, resamples, smooth ? bandwidth(x) : 0), 0.95);
        if (iv.lower <= 0 && 0 <= iv.upper) covered++;
      }
      cells.push((covered / experiments).toFixed(3));
    }
    rows.push([name, smooth ? 'smoothed (compare)' : 'plain percentile', ...cells]);
  }
}
const head = ['log ratios', 'bootstrap', ...sizes.map((n) => `n = ${n}`)];
if (markdown) {
  console.log(`| ${head.join(' | ')} |`);
  console.log(`|---|---|${sizes.map(() => '---:').join('|')}|`);
  for (const r of rows) console.log(`| ${r.join(' | ')} |`);
} else {
  for (const r of [head, ...rows]) console.log(r.map((c, i) => (i < 2 ? c.padEnd(20) : c.padStart(8))).join(''));
}
console.log(`\n${experiments} experiments per cell, ${resamples} resamples each; Monte Carlo SE of a cell ≈ ${Math.sqrt(0.95 * 0.05 / experiments).toFixed(4)}`);
