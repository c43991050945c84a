/** bench/compare.mjs (the allocator and profiler benchmarks, regenerated into bench/README.md
 * by `npm run bench:compare`) runs and reports complete figures. Structure only: the figures
 * themselves are recorded in bench/README.md, not asserted here. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';

interface Effect {
  ratio: number;
  lower: number;
  upper: number;
}
interface Figure {
  id: string;
  group: string;
  skippedBecause?: string;
  result?: {
    arms: { label: string }[];
    skipped: { label: string }[];
    failures: Record<string, { failed: number }>;
    effects: Record<string, Record<string, Effect | null>>;
    summary: Record<string, Record<string, { n: number; median: number }>>;
  };
  pairs: { arm: string; against: string; effects: Record<string, Effect | null> }[];
}

test('bench/compare.mjs --quick: a C workload, a Node workload and the profilers, complete', { timeout: 300_000 }, () => {
  const r = spawnSync(process.execPath, [join(root, 'bench', 'compare.mjs'), '--quick', '--json', '--only=c-cross-thread-2,node-mix,profilers'], {
    cwd: root,
    encoding: 'utf8',
    timeout: 290_000,
    maxBuffer: 256 << 20,
  });
  if (r.error) throw r.error;
  assert.equal(r.status, 0, `bench/compare.mjs failed (${r.status}):\n${r.stderr}`);
  const report = JSON.parse(r.stdout) as { quick: boolean; figures: Figure[]; machine: { cpu: string } };
  assert.equal(report.quick, true);
  assert.deepEqual(report.figures.map((f) => f.id), ['c-cross-thread-2', 'node-mix', 'profilers']);
  for (const f of report.figures) {
    const res = f.result!;
    assert.ok(res, `${f.id}: no result`);
    const labels = res.arms.map((a) => a.label);
    assert.ok(labels.includes('glibc') && labels.includes('mimalloc'), `${f.id}: arms ${labels.join(', ')}`);
    for (const [arm, fail] of Object.entries(res.failures)) assert.equal(fail.failed, 0, `${f.id}: ${arm} had failed runs`);
    for (const arm of labels) assert.ok(res.summary[arm]!.cpuS!.median > 0, `${f.id}: ${arm}: CPU time`);
    for (const [arm, byMetric] of Object.entries(res.effects)) {
      const e = byMetric.cpuS!;
      assert.ok(e && Number.isFinite(e.ratio) && e.lower <= e.ratio && e.ratio <= e.upper, `${f.id}: ${arm}: ${JSON.stringify(e)}`);
    }
  }
  const profilers = report.figures.find((f) => f.id === 'profilers')!;
  const pairs = profilers.pairs.map((p) => `${p.arm}/${p.against}`);
  for (const want of ['stopped/mimalloc', 'profiling/stopped']) assert.ok(pairs.includes(want), `profiler pairs: ${pairs.join(', ')}`);
  for (const p of profilers.pairs) assert.ok(p.effects.wallS && p.effects.wallS.ratio > 0, `${p.arm}/${p.against}`);
});
