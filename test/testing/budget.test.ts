/**
 * `memoryBudget` from `mimalloc-pprof/test` (issue 34 (2)) in a real `node --test` run under
 * `mimalloc-pprof run`: a test whose code keeps 1 MiB of Buffers (1024 of 1 KiB) fails its
 * 512 KiB retained budget, with the exact figure (1 MiB plus V8's record of each buffer: at most
 * 1.5 MiB) and the function that kept them named with file:line; its control, which drops them,
 * passes. Without the preload the test fails with the one line that says what to do.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { bytesOf } from '../../src/testing/budget.js';
import { root, tempDir } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixture = join(root, 'test', 'testing', 'fixtures', 'leaky.test.mjs');
// a node --test of its own, not a subtest of this runner's (NODE_TEST_CONTEXT would make it one)
const env = (drop: string[] = []) => Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT' && !drop.includes(k)));

test('memoryBudget under run -- node --test: the 1 MiB leak fails with its figure and function; the control passes', (t) => {
  // at run's 64 KiB interval the 1 MiB leak has ~16 samples to name it by (at 512 KiB, ~2)
  const r = spawnSync(process.execPath, [cli, 'run', '--interval', '64k', '--top', '0', '--out', join(tempDir('mpp-budget-'), 'p.pb.gz'), '--', process.execPath, '--test', '--test-reporter', 'tap', fixture], {
    encoding: 'utf8',
    cwd: root,
    env: env(),
    timeout: 120_000,
  });
  checkLeakCaught(t, r.stdout);
});

/** The fixture's output: the leak caught with its figure and function, the control passed. */
function checkLeakCaught(t: { diagnostic(s: string): void }, out: string): void {
  const failure = /error: 'memoryBudget: retained ([\d.]+)(KiB|MiB) > 512\.0KiB; most under: (\S+) (\S+):(\d+)/.exec(out);
  assert.ok(failure, out);
  t.diagnostic(failure[0]);
  // 1 MiB and V8's record of each buffer (1.13 MiB alone); the counts are process-wide, so
  // what other threads free meanwhile moves it (V8's sweeper and compiler threads finishing
  // earlier work: 0.77 MiB once on Node 22, and the control that keeps nothing 0.34 MiB once on
  // Node 24), so the budget is 512 KiB
  // (and what they keep: up to 1.99 MiB once on Node 24): the figure is checked from below
  const mib = Number(failure[1]) / (failure[2] === 'KiB' ? 1024 : 1);
  assert.ok(mib >= 0.5, `retained ${mib.toFixed(2)} MiB for 1 MiB kept`);
  assert.equal(failure[3], 'rememberPayloads');
  assert.equal(failure[4], fixture);
  assert.match(out, /^not ok 1 - leaky: keeps 1 MiB$/m);
  assert.match(out, /^ok 2 - control: drops what it handles$/m);
  const cost = /BUDGET .* with ([\d.]+) ms, alone ([\d.]+) ms/.exec(out);
  if (cost) t.diagnostic(`memoryBudget around a 1024-buffer loop: ${cost[1]} ms, the loop alone ${cost[2]} ms`);
}

test('memoryBudget with the preload set by hand (LD_PRELOAD and NODE_OPTIONS, no run): the same', (t) => {
  const lib = spawnSync(process.execPath, [cli, 'lib'], { encoding: 'utf8' }).stdout.trim();
  const r = spawnSync(process.execPath, ['--test', '--test-reporter', 'tap', fixture], {
    encoding: 'utf8',
    cwd: root,
    env: { ...env(['MIMALLOC_PROF']), LD_PRELOAD: lib, NODE_OPTIONS: '--perf-basic-prof --interpreted-frames-native-stack' },
    timeout: 120_000,
  });
  checkLeakCaught(t, r.stdout);
});

test('without the preload: one line that says how to run it', () => {
  const r = spawnSync(process.execPath, ['--test', '--test-reporter', 'tap', fixture], {
    encoding: 'utf8',
    cwd: root,
    env: env(['LD_PRELOAD', 'NODE_OPTIONS']),
    timeout: 60_000,
  });
  assert.notEqual(r.status, 0);
  assert.match(r.stdout, /memoryBudget needs the preload library: run the tests under it \(npx mimalloc-pprof run -- node --test\)/);
});

test('budgets are byte counts or sizes with k/m/g', () => {
  assert.equal(bytesOf('1m', 'x'), 1 << 20);
  assert.equal(bytesOf('512k', 'x'), 512 << 10);
  assert.equal(bytesOf(1000, 'x'), 1000);
  assert.throws(() => bytesOf('lots', 'retained'), /memoryBudget: retained must be a byte count/);
});
