/** The Node profiler-cost benchmark (bench/node-profiler.mjs) runs both parts and reports finite
 * figures, for each of its two workloads (node-mix, http-workers) in the default design (Node as
 * users run it: plain): the three per-block ratios for wall, CPU and peak RSS, and each profiler's wall and
 * CPU cost split into its entry points' part and its samples' part, each median inside its own
 * interval, and the peak RSS split into file-backed pages and the rest, with the profile's
 * estimate of the live heap and the profiler's own count of what it adds. Structure only: timings belong in bench/README.md. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';

interface Estimate { median: number; lo: number; hi: number }
interface Workload {
  id: string;
  blocks: number;
  split: Record<'wall' | 'cpu', Record<'oursEntryPoints' | 'oursSamples' | 'jemallocEntryPoints' | 'jemallocSamples', Estimate>>;
  costs: Record<'wall' | 'cpu' | 'peakRss', { ours: Estimate; jemallocProfiler: Estimate; oursOverJemalloc: Estimate }>;
}
interface Report {
  design: string;
  workloads: Workload[];
  rss: {
    pairs: number;
    peakKiB: Estimate;
    fileKiB: Estimate;
    restKiB: Estimate;
    liveHeapAtPeakKiB: { median: number; min: number; max: number };
    profilerResidentKiB: { median: number; min: number; max: number };
    roundingAtPeakKiB: { median: number; min: number; max: number };
    addedByConstructionKiB: number;
    addedShareOfLiveHeap: number;
  };
}

test('bench/node-profiler.mjs --quick --json: every figure, finite, each median within its interval', () => {
  const r = spawnSync(process.execPath, [join(root, 'bench', 'node-profiler.mjs'), '--quick', '--json'], { encoding: 'utf8', timeout: 300_000 });
  assert.equal(r.status, 0, r.stderr);
  const report = JSON.parse(r.stdout) as Report;
  assert.equal(report.design, 'plain');
  assert.deepEqual(report.workloads.map((w) => w.id), ['mix', 'http-workers']);
  for (const w of report.workloads) {
    assert.equal(w.blocks, 2);
    const figures = [
      ...(['wall', 'cpu', 'peakRss'] as const).flatMap((metric) => Object.entries(w.costs[metric]).map(([name, e]) => [`${w.id} ${metric} ${name}`, e] as const)),
      ...(['wall', 'cpu'] as const).flatMap((metric) => Object.entries(w.split[metric]).map(([name, e]) => [`${w.id} ${metric} ${name}`, e] as const)),
    ];
    assert.equal(figures.length, 3 * 3 + 2 * 4);
    for (const [name, e] of figures) {
      assert.ok(Number.isFinite(e.median) && e.median > 0, `${name}: ${JSON.stringify(e)}`);
      assert.ok(e.lo <= e.median && e.median <= e.hi, `${name}: ${JSON.stringify(e)}`);
    }
  }
  assert.equal(report.rss.pairs, 2);
  for (const e of [report.rss.peakKiB, report.rss.fileKiB, report.rss.restKiB]) assert.ok(Number.isFinite(e.median) && e.lo <= e.hi);
  assert.ok(report.rss.liveHeapAtPeakKiB.min > 0 && report.rss.liveHeapAtPeakKiB.min <= report.rss.liveHeapAtPeakKiB.max);
  const own = report.rss.profilerResidentKiB;
  assert.ok(own.min > 0 && own.min <= own.median && own.median <= own.max, JSON.stringify(own));
  const rounding = report.rss.roundingAtPeakKiB;
  assert.ok(rounding.min >= 0 && rounding.min <= rounding.median && rounding.median <= rounding.max, JSON.stringify(rounding));
  assert.ok(report.rss.addedByConstructionKiB >= own.median + rounding.median && Number.isFinite(report.rss.addedShareOfLiveHeap));
});
