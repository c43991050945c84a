/** The Node features' benchmark (bench/node-features.mjs: the thread-pool watch, the JavaScript
 * heap sampler) runs every arm and reports finite effects with their intervals. Structure only: its timings belong in bench/README.md. */
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

test('bench/node-features.mjs --quick --json: wall, CPU and RSS effects of the watch on both workloads and the CPU per item, finite', () => {
  const r = spawnSync(process.execPath, [join(root, 'bench', 'node-features.mjs'), '--quick', '--json'], { encoding: 'utf8', timeout: 300_000 });
  assert.equal(r.status, 0, r.stderr);
  const report = JSON.parse(r.stdout) as { figures: Record<'wall' | 'cpu' | 'rss', Effect>; items: Record<'wall' | 'cpu' | 'rss', Effect>; jsHeap: Record<'wall' | 'cpu' | 'rss', Effect>; perItemNs: number; posterItemsNs: number; posterChunksNs: number };
  assert.ok(Number.isFinite(report.perItemNs), String(report.perItemNs));
  assert.ok(report.posterItemsNs > 0 && report.posterChunksNs > 0, `poster timings ${report.posterItemsNs} ${report.posterChunksNs}`);
  for (const [id, e] of [...Object.entries(report.figures), ...Object.entries(report.items), ...Object.entries(report.jsHeap)]) {
    assert.ok([e.ratio, e.lower, e.upper].every((v) => Number.isFinite(v) && v > 0), `${id}: ${JSON.stringify(e)}`);
    assert.ok(e.lower <= e.ratio && e.ratio <= e.upper, `${id}: ${JSON.stringify(e)}`);
  }
});
