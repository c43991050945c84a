/** Gate 5, memory (docs/reliability.md): peak RSS and profiler memory of the reference
 * workload under the preload, the minimum of 4 runs each, against the committed baseline
 * (test/reliability/memory-baseline.json) with a tolerance derived from the baseline's spread;
 * test/reliability/memory-gate.mjs does the work and prints tolerance and spread every run.
 * Controls: an injected leak fails it, in each metric: the test-hooks library with
 * MP_TEST_LEAK=1 (the profiler never releases its memory) fails the profiler-memory check, and
 * the workload leaking 8 MiB fails the peak-RSS check. An injected run is refused as a baseline. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';
import { makeVars } from '../mimalloc.js';
import { buildTestHooks, MiB } from './util.js';

const script = join(root, 'test', 'reliability', 'memory-gate.mjs');
const baselineFile = join(root, 'test', 'reliability', makeVars.length === 0 ? 'memory-baseline.json' : 'memory-baseline-mimalloc3.json');
const VERDICT = /^memory-gate: (peak_rss|profiler_peak) min .*: (ok|FAIL)$/gm;

function gate(args: string[], env: Record<string, string> = {}) {
  // MIMALLOC_PPROF_* stay: they name the library and mimalloc under test (test/mimalloc.ts)
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('MP_TEST_') && (!k.startsWith('MIMALLOC_') || k.startsWith('MIMALLOC_PPROF_'))),
  );
  const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', env: { ...clean, ...env }, timeout: 300_000 });
  if (r.error) throw r.error;
  const verdicts = new Map([...r.stdout.matchAll(VERDICT)].map((m) => [m[1]!, m[0]] as const));
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, verdicts };
}

test('memory gate: peak RSS and profiler memory of the reference workload within the baseline\'s tolerance', (t) => {
  const r = gate([]);
  for (const line of r.stdout.trim().split('\n')) t.diagnostic(line);
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  assert.match(r.verdicts.get('peak_rss') ?? '', /: ok$/);
  assert.match(r.verdicts.get('profiler_peak') ?? '', /: ok$/);
});

test('positive control: a profiler that never releases its memory (MP_TEST_LEAK=1) fails the memory gate', (t) => {
  const r = gate(['--lib', buildTestHooks()], { MP_TEST_LEAK: '1' });
  for (const line of r.verdicts.values()) t.diagnostic(`control: ${line}`);
  assert.equal(r.status, 1, `${r.stdout}${r.stderr}`);
  assert.match(r.verdicts.get('profiler_peak') ?? '', /: FAIL$/);
});

test('positive control: a workload leaking 8 MiB fails the peak-RSS check', (t) => {
  const r = gate(['--leak', String(8 * MiB)]);
  for (const line of r.verdicts.values()) t.diagnostic(`control: ${line}`);
  assert.equal(r.status, 1, `${r.stdout}${r.stderr}`);
  assert.match(r.verdicts.get('peak_rss') ?? '', /: FAIL$/);
});

test('--update refuses to write a baseline from an injected run', (t) => {
  const before = readFileSync(baselineFile, 'utf8');
  for (const [args, env] of [
    [['--update', '--leak', '1048576'], {}],
    [['--update'], { MP_TEST_LEAK: '1' }],
    [['--update', '--lib', buildTestHooks()], {}],
  ] as const) {
    const r = gate([...args], env);
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, /^memory-gate: refusing to write a baseline from an injected run/m);
    t.diagnostic(`refused: ${args.join(' ')} ${Object.entries(env).map(([k, v]) => `${k}=${v}`).join(' ')}`);
  }
  assert.equal(readFileSync(baselineFile, 'utf8'), before, 'the baseline file was not touched');
});
