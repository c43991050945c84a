/** The sample-cost benchmark (bench/sample-cost.mjs) runs every figure and reports finite,
 * positive numbers, and every C pair it times is a sample. Structure only: timings belong in
 * bench/README.md, not in assertions on a shared machine. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';

interface Report {
  c: { code: string; thread: string; sampledNs: number; stoppedNs: number; extraNs: number }[];
  node: { perSampleNs: number; samplesPerAlloc: number; sampledNs: number; stoppedNs: number };
  scale: { profiling: number; stopped: number; onePairsPerSecond: number };
}

test('bench/sample-cost.mjs --quick --json: every figure, finite and positive', () => {
  const r = spawnSync(process.execPath, [join(root, 'bench', 'sample-cost.mjs'), '--quick', '--json'], {
    encoding: 'utf8',
    timeout: 300_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const report = JSON.parse(r.stdout) as Report;
  assert.deepEqual(
    report.c.map((x) => `${x.code}/${x.thread}`),
    ['frame pointers/main', 'frame pointers/worker', 'no frame pointers/main', 'no frame pointers/worker'],
  );
  for (const x of report.c) for (const v of [x.sampledNs, x.stoppedNs]) assert.ok(Number.isFinite(v) && v > 0, JSON.stringify(x));
  assert.ok(Number.isFinite(report.node.perSampleNs));
  // every 64 KiB allocation at interval 4 KiB is sampled (p = 1 - e^-16), plus some of node's own
  assert.ok(report.node.samplesPerAlloc >= 1, JSON.stringify(report.node));
  for (const v of [report.scale.profiling, report.scale.stopped, report.scale.onePairsPerSecond]) assert.ok(Number.isFinite(v) && v > 0);
});
