/** The debug build (native/Makefile DEBUG=1, src/debug.h): the rules the C comments state
 * (lock order, the reentrancy guard held under every lock, the record <-> bucket counts) are
 * assertions there, and the gates run once more on it (scripts/run-tests.mjs, the debug pass).
 * Here: the production library carries no assertion, the debug one does, and a planted
 * violation (the test-hooks debug build with MP_TEST_UNGUARDED_STATS=1: stats taken without
 * the guard) stops the process with the assertion's file and line: the positive control that
 * the assertions are live. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { fixture } from '../helpers.js';
import { testBuildRoot } from '../mimalloc.js';
import { make, productionDir, runUnder } from './util.js';

const debugDir = join(testBuildRoot, 'debug');
const debugHooksDir = join(testBuildRoot, 'debug-test-hooks');

/** Whether the library's symbol table has the assertions' failure routine. */
function hasAssertions(lib: string): boolean {
  const nm = spawnSync('nm', [lib], { encoding: 'utf8', maxBuffer: 64 << 20 });
  assert.equal(nm.status, 0, nm.stderr);
  return /\bmp_assert_fail\b/.test(nm.stdout);
}

test('the debug build carries its assertions; the production library none', () => {
  make('all', debugDir, ['DEBUG=1']);
  assert.ok(hasAssertions(join(debugDir, 'libmimalloc-pprof.so')));
  assert.ok(!hasAssertions(join(productionDir, 'libmimalloc-pprof.so')));
});

test('positive control: a lock taken without the reentrancy guard stops a debug build with file:line', (t) => {
  make('all', debugHooksDir, ['DEBUG=1', 'EXTRA_CFLAGS=-DMP_TEST_HOOKS']);
  const bin = fixture('api');
  const clean = runUnder(debugHooksDir, bin, ['stats'], { MIMALLOC_PROF: '1' }, 30_000);
  assert.equal(clean.status, 0, clean.stderr);
  const r = runUnder(debugHooksDir, bin, ['stats'], { MIMALLOC_PROF: '1', MP_TEST_UNGUARDED_STATS: '1' }, 30_000);
  const line = r.stderr.split('\n').find((l) => l.includes('assertion failed')) ?? '';
  t.diagnostic(line);
  assert.equal(r.signal, 'SIGABRT');
  assert.match(line, /^mimalloc-pprof: assertion failed: mp_tls\.in_profiler \(src\/util\.c:\d+\)$/);
});
