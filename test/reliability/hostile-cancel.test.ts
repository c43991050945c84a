/** pthread_cancel against the library (native/src/cancel.h): a cancel is never acted on inside
 * the malloc family, C++ new/delete or any mi_prof_* / mi_memory_* call, and no cancel leaves a
 * profiler lock held. Deferred cancellation throughout (the default): a cancel that arrives
 * inside such a call stays pending until the program's next cancellation point, which may be
 * the boundary of a start (its entry), a dump (its entry) or a stop (its return), where the
 * library holds nothing and the profiler's state is what the program left (api.c).
 *  - a storm across the lifecycle: a switcher thread loops start/dumps/events/stats/reset/stop
 *    and is cancelled after 0..1.5 ms, then replaced (about 2000 threads in 3 s), with other
 *    threads registered so that every start pauses in its resync under the lifecycle and
 *    registry locks; then a stop, a final start and a new thread's first sample must all go
 *    through;
 *  - a storm across malloc: threads lock a mutex, allocate every way (sampled, at 4 KiB) with
 *    their cancel pending, unlock, then call pthread_testcancel: no mutex may be left locked;
 *    again with what `run` sets (V8's perf map looked for as buckets are made, the run's folder
 *    where every process leaves a marker), and once forking there too: each child must run.
 * Controls: the test-hooks build with MP_TEST_CANCELLABLE_API=1 (entry points left cancellable,
 * resync's pause libc's nanosleep) hangs the first storm, which the fixture's watchdog reports;
 * a fixture mode that calls usleep (a real cancellation point) inside the locked region shows
 * that the second storm's counter sees a mutex left locked. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';

import { buildTestHooks, cFixture, ending, fastTempDir, fileContains, KV, productionDir, runUnder, type GateRun } from './util.js';

const TIMEOUT_MS = 30_000; // the fixture's own watchdog reports a hang after 5 s without progress
const STORM_SECONDS = '3';
const ROUNDS = '5';
const THREADS = 24;
const SAMPLED = { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096' };

function lifecycle(libDir: string, env: Record<string, string> = {}): { r: GateRun; out: KV } {
  const r = runUnder(libDir, cFixture('cancel', libDir), ['lifecycle', fastTempDir('mpp-cancel-'), STORM_SECONDS], env, TIMEOUT_MS);
  return { r, out: new KV(r.stdout) };
}

/** What `run` sets besides (src/run/index.ts): V8's perf map looked for when a bucket is made
 * (/tmp/perf-<pid>.map: none here, so each sample may try to open it), the run's folder, where
 * each process, a fork child too, leaves its marker. */
const UNDER_RUN = () => ({ MIMALLOC_PROF_PERF_MAP: '1', MIMALLOC_PPROF_RUN_DIR: fastTempDir('mpp-cancel-run-'), MIMALLOC_PROF_ACCUM: '1' });

function mallocs(libDir: string, rounds: string, extra: string[] = [], env: Record<string, string> = {}): { r: GateRun; out: KV } {
  const r = runUnder(libDir, cFixture('cancel', libDir), ['malloc', rounds, String(THREADS), ...extra], { ...SAMPLED, ...env }, TIMEOUT_MS);
  return { r, out: new KV(r.stdout) };
}

const summary = (r: GateRun, out: KV): string => `${ending(r)}: ${out.text.trim().split('\n').join(' ')}${r.stderr.trim() ? ` | stderr: ${r.stderr.trim().split('\n').slice(-3).join(' / ')}` : ''}`;

test('a pthread_cancel storm across start/stop/dumps/events: no cancel inside the API, then a start and a new thread go through', (t) => {
  const { r, out } = lifecycle(productionDir);
  t.diagnostic(summary(r, out));
  assert.ok(!r.timedOut && r.status === 0 && !out.has('hung'), `the storm did not end: ${summary(r, out)}`);
  assert.ok(out.num('cancels') >= 100, `only ${out.num('cancels')} cancels`);
  assert.equal(out.num('cancelled'), out.num('cancels'), 'every switcher ends cancelled (at its pthread_testcancel or a call\'s boundary)');
  t.diagnostic(`${out.num('cancelled_at_points')} cancels acted on at the entry of a start or a dump, or the return of a stop`);
  assert.equal(out.num('cancelled_in_api'), 0, 'cancels acted on inside an mi_prof_*/mi_memory_* call');
  assert.equal(out.num('cancelled_in_malloc'), 0, 'cancels acted on inside malloc/free');
  assert.ok(out.num('starts_ok') > 0 && out.num('dumps_ok') > 0, 'the switchers started and dumped');
  assert.equal(out.num('final_start'), 1, 'the start after the storm failed');
  assert.ok(out.num('newcomer_live_samples') >= 1, "the new thread's 1 MiB block was not sampled");
  assert.equal(out.num('final_dump'), 1);
});

test('positive control: entry points left cancellable (MP_TEST_CANCELLABLE_API=1) hang the lifecycle storm', (t) => {
  const hooks = buildTestHooks();
  assert.ok(fileContains(join(hooks, 'libmimalloc-pprof.so'), 'MP_TEST_CANCELLABLE_API'), 'the test-hooks build lacks MP_TEST_CANCELLABLE_API');
  const { r, out } = lifecycle(hooks, { MP_TEST_CANCELLABLE_API: '1' });
  t.diagnostic(`control: ${summary(r, out)}`);
  const caught =
    r.timedOut || out.has('hung') || r.status !== 0 || (out.has('cancelled_in_api') && out.num('cancelled_in_api') > 0) || out.num('final_start') !== 1;
  assert.ok(caught, `the storm passed a library whose entry points are cancellable: ${summary(r, out)}`);
});

test(`a pthread_cancel storm across malloc: ${THREADS} threads per round allocate with a cancel pending while holding a mutex, none leaves it locked`, (t) => {
  const { r, out } = mallocs(productionDir, ROUNDS);
  t.diagnostic(summary(r, out));
  assert.ok(!r.timedOut && r.status === 0 && !out.has('hung'), `the storm did not end: ${summary(r, out)}`);
  const threads = Number(ROUNDS) * THREADS;
  assert.equal(out.num('threads'), threads);
  assert.equal(out.num('cancelled'), threads, 'every thread ends cancelled (at its pthread_testcancel)');
  assert.equal(out.num('stuck'), 0, 'threads cancelled inside the allocation calls left their mutex locked');
  assert.equal(out.num('cancelled_in_malloc'), 0);
  // each round's 1 MiB blocks (one a thread, kept to the round's end) are sampled at 4 KiB
  assert.ok(out.num('min_live_samples') >= THREADS, `only ${out.num('min_live_samples')} live samples: the sample path did not run`);
});

test(`the same storm as under run (perf map looked for, the run's folder): the sample path opens nothing cancellably, and a fork with a cancel pending runs its child`, (t) => {
  for (const mode of [[], ['fork']]) {
    const { r, out } = mallocs(productionDir, ROUNDS, mode, UNDER_RUN());
    t.diagnostic(`${mode.join('') || 'malloc'}: ${summary(r, out)}`);
    assert.ok(!r.timedOut && r.status === 0 && !out.has('hung'), `the storm did not end: ${summary(r, out)}`);
    assert.equal(out.num('stuck'), 0, `${mode.join('') || 'malloc'}: threads cancelled inside the library left their mutex locked`);
    assert.equal(out.num('cancelled_in_malloc'), 0);
    assert.ok(out.num('min_live_samples') >= THREADS, `only ${out.num('min_live_samples')} live samples`);
    if (mode.length > 0) {
      assert.equal(out.num('forked'), Number(ROUNDS) * THREADS);
      assert.equal(out.num('fork_cancelled'), 0, 'children whose pending cancel was acted on in the fork handlers');
    }
  }
});

test('positive control: a real cancellation point (usleep) inside the locked region leaves every mutex locked, and the counter sees it', (t) => {
  const { r, out } = mallocs(productionDir, '2', ['control']);
  t.diagnostic(`control: ${summary(r, out)}`);
  assert.ok(!r.timedOut && r.status === 0, summary(r, out));
  assert.equal(out.num('stuck'), 2 * THREADS, 'the counter missed mutexes left locked by threads cancelled in usleep');
});
