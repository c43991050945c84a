/** The thread-pool watch's benchmark (bench/pool-cost.mjs) runs both arms and reports finite
 * effects with their intervals. Structure only: its timings belong in bench/README.md. */
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

test('bench/pool-cost.mjs --quick --json: wall, CPU and RSS effects of the watch on both workloads and the CPU per item, finite', () => {
  const r = spawnSync(process.execPath, [join(root, 'bench', 'pool-cost.mjs'), '--quick', '--json'], { encoding: 'utf8', timeout: 300_000 });
  assert.equal(r.status, 0, r.stderr);
  const report = JSON.parse(r.stdout) as { figures: Record<'wall' | 'cpu' | 'rss', Effect>; items: Record<'wall' | 'cpu' | 'rss', Effect>; perItemNs: number };
  assert.ok(Number.isFinite(report.perItemNs), String(report.perItemNs));
  for (const [id, e] of [...Object.entries(report.figures), ...Object.entries(report.items)]) {
    assert.ok([e.ratio, e.lower, e.upper].every((v) => Number.isFinite(v) && v > 0), `${id}: ${JSON.stringify(e)}`);
    assert.ok(e.lower <= e.ratio && e.ratio <= e.upper, `${id}: ${JSON.stringify(e)}`);
  }
});
