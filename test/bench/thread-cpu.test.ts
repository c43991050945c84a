/** The per-thread CPU benchmark (bench/thread-cpu.mjs) runs both arm sets and reports each
 * thread's ticks. Structure only: its figures belong in bench/README.md. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';
import { buildTestHooks } from '../reliability/util.js';

for (const arms of ['stopped,profiling', 'keep,give', 'each,burst']) {
  test(`bench/thread-cpu.mjs --quick --json --arms ${arms}: a main thread and others, ticks counted in both arms`, () => {
    buildTestHooks(); // build/test-hooks, which the keep,give and each,burst arms preload (made by the test set-up already)
    const r = spawnSync(process.execPath, [join(root, 'bench', 'thread-cpu.mjs'), '--quick', '--json', '--arms', arms], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(r.status, 0, r.stderr);
    const report = JSON.parse(r.stdout) as { arms: string[]; threads: Record<string, [number, number]>; total: [number, number] };
    assert.deepEqual(report.arms, arms.split(','));
    assert.ok('main' in report.threads && Object.keys(report.threads).length >= 3, JSON.stringify(report.threads));
    assert.ok(report.total.every((t) => Number.isInteger(t) && t > 0), JSON.stringify(report.total));
  });
}

test('bench/thread-cpu.mjs: an unknown arm set is one line and exit 2', () => {
  const r = spawnSync(process.execPath, [join(root, 'bench', 'thread-cpu.mjs'), '--quick', '--arms', 'x'], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 2);
  assert.match(r.stderr.trim(), /^bench\/thread-cpu: --arms: one of /);
});
