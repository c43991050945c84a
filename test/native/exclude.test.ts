/**
 * mi_prof_thread_exclude, on a thread made by C11's thrd_create: what an excluded thread
 * allocates is not in the profile's estimate; without the exclusion (the control) it is.
 * Tolerance: 4 standard errors of the estimate as the library reports it
 * (estimated_live_bytes_variance), plus a 256 KiB allowance for the process's own start-up.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fixture, runPreloaded } from '../helpers.js';
import { mimallocLabel } from '../mimalloc.js';

const MiB = 1 << 20;

function run(args: string[]) {
  const r = runPreloaded(fixture('thread_exclude'), args, { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '65536', MIMALLOC_PROF_SEED: '5' });
  assert.equal(r.status, 0, r.stderr);
  const kv = Object.fromEntries(r.stdout.trim().split('\n').map((l) => l.split('=') as [string, string]));
  return { live: Number(kv.estimated_live_bytes), se: Number(kv.stderr_bytes), before: kv.before, after: kv.after };
}

test(`an excluded thread's allocations stay out of the estimate; the control's do not (${mimallocLabel})`, () => {
  const excluded = run([]);
  assert.equal(excluded.before, '0');
  assert.equal(excluded.after, '1', 'the second call returns the setting the first made');
  assert.ok(Math.abs(excluded.live - 4 * MiB) <= 4 * excluded.se + 256 * 1024, `excluded: ${excluded.live} ± ${excluded.se}`);
  const control = run(['control']);
  assert.ok(Math.abs(control.live - 16 * MiB) <= 4 * control.se + 256 * 1024, `control: ${control.live} ± ${control.se}`);
});
