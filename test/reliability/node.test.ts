/** Gate 7, Node under the preload on each mimalloc (docs/reliability.md): the Node workload of
 * Buffers, JSON, open zlib streams, crypto and worker_threads, profiled at a 32 KiB interval,
 * run 10 times per mimalloc major (scripts/run-tests.mjs runs this file once per major), and 5
 * times at 4 KiB, where far more sampled blocks cross threads: no run may crash and every
 * at-exit profile must be valid. test/reliability/node-gate.mjs does the
 * work (`--runs 50` gives the figures in docs/reliability.md).
 * Control: the test-hooks library with MP_TEST_SHARED_HEAP=1 allocates every thread's samples
 * from one mimalloc heap, as this library once did. mimalloc heaps are bound to the thread that
 * made them (2.x, and 3.x before 3.2.6), so that corrupts mimalloc's page queues: the same
 * gate must see Node crash. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';
import { libDir, mimallocLabel } from '../mimalloc.js';
import { buildTestHooks } from './util.js';

const script = join(root, 'test', 'reliability', 'node-gate.mjs');

function gate(args: string[], env: Record<string, string> = {}) {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MP_TEST_')));
  const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', env: { ...clean, ...env }, timeout: 600_000 });
  if (r.error) throw r.error;
  const summary = /^node-gate: (\d+) runs under mimalloc (\S+) .*: (\d+) crashed, (\d+) invalid profiles$/m.exec(r.stdout);
  assert.ok(summary, `no summary line:\n${r.stdout}${r.stderr}`);
  return { status: r.status, stdout: r.stdout, runs: +summary[1]!, version: summary[2]!, crashed: +summary[3]!, invalid: +summary[4]! };
}

test(`Node gate: 10 profiled runs of the Node workload at 32 KiB and 5 at 4 KiB, no crash and every profile valid (${mimallocLabel})`, (t) => {
  for (const [runs, interval] of [['10', '32k'], ['5', '4k']] as const) {
    const r = gate(['--runs', runs, '--interval', interval, '--lib', libDir]);
    t.diagnostic(`mimalloc ${r.version}, interval ${interval}: ${r.runs} runs, ${r.crashed} crashed, ${r.invalid} invalid profiles`);
    assert.equal(r.status, 0, r.stdout);
    assert.equal(r.crashed + r.invalid, 0);
  }
});

test('positive control: one mimalloc heap for all threads\' samples (MP_TEST_SHARED_HEAP=1) makes the Node gate fail', (t) => {
  // at 4 KiB (many more sampled blocks cross threads) the shared heap crashed 8 of 10 runs on
  // 3.0.1 and 10 of 10 on 2.0.9; at 32 KiB 1 of 10 and 3 of 10
  const r = gate(['--runs', '20', '--interval', '4k', '--stop-at-first', '--lib', buildTestHooks()], { MP_TEST_SHARED_HEAP: '1' });
  t.diagnostic(`control, mimalloc ${r.version}: run ${r.runs} of at most 20 crashed or hung`);
  assert.equal(r.status, 1, r.stdout);
  assert.ok(r.crashed > 0);
});
