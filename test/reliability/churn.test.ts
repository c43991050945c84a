/** Gate 1, thread churn (docs/reliability.md): 10 000 threads created and joined with
 * profiling on at 4 KiB leave no trace: RSS grows by at most 16 MiB, the live sample records
 * return to their baseline, the profiler's own memory and buckets do not grow with the
 * threads, and no sample is taken once a thread's teardown began (the sample a TLS destructor
 * takes after the library's key destructor is dropped, and the thread is not registered again).
 * Control: the test-hooks build with MP_TEST_SKIP_THREAD_EXIT=1 (the trampoline's cleanup
 * skipped) fails the gate. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { buildTestHooks, cFixture, ending, KV, MiB, mib, productionDir, runUnder } from './util.js';

const THREADS = 10_000;
const BATCH = 8;
const INTERVAL = 4096;
const RSS_GROWTH_MAX = 16 * MiB;
const PROFILER_GROWTH_MAX = 1 * MiB; // ~100 bytes a thread would already be a per-thread leak
const BUCKET_GROWTH_MAX = 64;

interface Verdict {
  failures: string[];
  report: string[];
}

function churnGate(libDir: string, env: Record<string, string> = {}): Verdict {
  const bin = cFixture('churn', libDir);
  const r = runUnder(libDir, bin, [String(THREADS), String(BATCH), String(INTERVAL)], env, 180_000);
  const out = new KV(r.stdout);
  const report: string[] = [];
  const failures: string[] = [];
  if (r.timedOut || r.status !== 0) {
    const where = out.has('end.threads') ? 'at the end' : out.has('base.threads') ? 'after the baseline' : 'before the baseline (the first 200 threads)';
    const line = `churn: ${ending(r)} ${where}${r.stderr.trim() ? `: ${r.stderr.trim().split('\n').pop()}` : ''}`;
    return { failures: [line], report: [line] };
  }
  const check = (what: string, ok: boolean, detail: string): void => {
    const line = `churn: ${what}: ${detail}: ${ok ? 'ok' : 'FAIL'}`;
    report.push(line);
    if (!ok) failures.push(line);
  };
  const base = (k: string) => out.num(`base.${k}`);
  const end = (k: string) => out.num(`end.${k}`);
  const rss = end('rss') - base('rss');
  check('RSS growth', rss <= RSS_GROWTH_MAX, `${mib(base('rss'))} -> ${mib(end('rss'))} (${mib(rss)}, limit ${mib(RSS_GROWTH_MAX)})`);
  check('live sample records', end('live_samples') <= base('live_samples'), `${base('live_samples')} -> ${end('live_samples')} (limit: the baseline)`);
  const prof = end('profiler_bytes') - base('profiler_bytes');
  check(
    'profiler memory',
    prof <= PROFILER_GROWTH_MAX,
    `${mib(base('profiler_bytes'))} -> ${mib(end('profiler_bytes'))} (limit +${mib(PROFILER_GROWTH_MAX)})`,
  );
  check(
    'buckets',
    end('unique_stacks') <= base('unique_stacks') + BUCKET_GROWTH_MAX,
    `${base('unique_stacks')} -> ${end('unique_stacks')} (limit +${BUCKET_GROWTH_MAX})`,
  );
  check(
    'teardown samples dropped (no sample once a thread ends)',
    end('dropped_samples') >= end('threads'),
    `${end('dropped_samples')} of ${end('threads')} threads`,
  );
  return { failures, report };
}

test(`thread churn: ${THREADS} threads at interval ${INTERVAL} leave RSS, records and profiler state at their baseline`, (t) => {
  const started = performance.now();
  const { failures, report } = churnGate(productionDir);
  for (const line of report) t.diagnostic(line);
  t.diagnostic(`churn gate: ${((performance.now() - started) / 1000).toFixed(1)} s`);
  assert.deepEqual(failures, []);
});

test('positive control: with the thread-exit cleanup skipped (MP_TEST_SKIP_THREAD_EXIT=1) the churn gate fails', (t) => {
  const hooks = buildTestHooks();
  const { failures } = churnGate(hooks, { MP_TEST_SKIP_THREAD_EXIT: '1' });
  for (const line of failures) t.diagnostic(`control caught: ${line}`);
  assert.ok(failures.length > 0, 'the churn gate passed a library that skips its thread-exit cleanup');
});
