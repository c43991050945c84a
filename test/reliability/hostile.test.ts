/** Gate 8, hostile programs (docs/reliability.md): programs that leave the allocator no slack
 * run under the profiler as they run without it (test/reliability/fixtures/hostile.c, sampling
 * at 4 KiB so that nearly every allocation of interest is a sample):
 *  - a seccomp filter that kills the process at open/openat, installed before a thread starts
 *    and allocates: the sample path opens nothing;
 *  - RLIMIT_NOFILE with one descriptor free, which the program opens and closes in a loop while
 *    other threads take samples: the program's own opens never fail;
 *  - threads on PTHREAD_STACK_MIN stacks with 6 KiB used, and a handler on an 8 KiB alternate
 *    stack, allocating sampled blocks; and a sampled malloc uses at most 1 KiB of stack more
 *    than the same malloc with the profiler off;
 *  - fork storms while threads come and go taking samples: no child holds a descriptor the
 *    program did not open.
 * Each case runs with the profiler off too (the program's own behaviour), and each has a
 * positive control on the test-hooks build that the same assertion rejects: a sample that
 * holds a file open while it walks (MP_TEST_SAMPLE_OPEN=1: what reading unwind rules from the
 * objects' files did) for the first and last two, 8 KiB of scratch on the stack
 * (MP_TEST_STACK_HOG=1: what the walk's buffers were) for the stack cases. */
import assert from 'node:assert/strict';
import { basename, join } from 'node:path';
import { test } from 'node:test';

import { mimallocLabel } from '../mimalloc.js';
import { runTarget } from '../helpers.js';
import { buildTestHooks, cFixture, KV, plainFixture, productionDir, runUnder, type GateRun } from './util.js';

const TIMEOUT_MS = 30_000;
/** The program alone (the library loaded, the profiler off), then profiling. */
const OFF_THEN_ON: Record<string, string>[] = [{ NOPROF: '1' }, {}];

function hostile(libDir: string, args: string[], env: Record<string, string> = {}): GateRun & { kv: KV } {
  const r = runUnder(libDir, cFixture('hostile', libDir), args, env, TIMEOUT_MS);
  return { ...r, kv: new KV(r.stdout) };
}

function ok(r: GateRun, what: string): void {
  assert.ok(!r.timedOut, `${what}: hung (killed after ${TIMEOUT_MS / 1000} s)`);
  assert.equal(r.signal, null, `${what}: died by ${r.signal}\n${r.stderr}`);
  assert.equal(r.status, 0, `${what}: exit status ${r.status}\n${r.stderr}`);
}

test(`seccomp killing open/openat: a new thread's samples go through (${mimallocLabel})`, () => {
  for (const env of OFF_THEN_ON) {
    const r = hostile(productionDir, ['seccomp'], env);
    ok(r, `seccomp ${JSON.stringify(env)}`);
    assert.equal(r.kv.num('done'), 1);
  }
});

test('positive control: a sample that opens a file (MP_TEST_SAMPLE_OPEN=1) is killed by the filter', () => {
  const r = hostile(buildTestHooks(), ['seccomp'], { MP_TEST_SAMPLE_OPEN: '1' });
  assert.equal(r.signal, 'SIGSYS', `status ${r.status} signal ${r.signal}`);
});

test(`one descriptor free: the program's own opens never fail while threads sample (${mimallocLabel})`, (t) => {
  for (const env of OFF_THEN_ON) {
    const r = hostile(productionDir, ['emfile'], env);
    ok(r, `emfile ${JSON.stringify(env)}`);
    t.diagnostic(`${JSON.stringify(env)}: ${r.kv.num('opens')} opens, ${r.kv.num('emfile')} EMFILE`);
    assert.equal(r.kv.num('emfile'), 0);
    assert.equal(r.kv.num('opens'), 200_000);
  }
});

test('positive control: a sample that holds a descriptor (MP_TEST_SAMPLE_OPEN=1) makes the program\'s open fail', (t) => {
  const r = hostile(buildTestHooks(), ['emfile'], { MP_TEST_SAMPLE_OPEN: '1' });
  ok(r, 'emfile control');
  t.diagnostic(`${r.kv.num('emfile')} EMFILE in ${r.kv.num('opens') + r.kv.num('emfile')} opens`);
  assert.ok(r.kv.num('emfile') > 0, 'no open failed');
});

test(`PTHREAD_STACK_MIN threads with 6 KiB used allocate sampled blocks (${mimallocLabel})`, () => {
  for (const env of OFF_THEN_ON) {
    const r = hostile(productionDir, ['small-stack', '6'], env);
    ok(r, `small stack ${JSON.stringify(env)}`);
    assert.equal(r.kv.num('done'), 1);
  }
});

test(`a handler on an 8 KiB alternate stack allocates sampled blocks (${mimallocLabel})`, (t) => {
  for (const env of OFF_THEN_ON) {
    const r = hostile(productionDir, ['altstack'], env);
    ok(r, `altstack ${JSON.stringify(env)}`);
    t.diagnostic(`${JSON.stringify(env)}: ${r.kv.num('altstack_used')} of 8192 bytes of the alternate stack used`);
    assert.equal(r.kv.num('handled'), 50);
  }
});

test(`a sampled malloc uses at most 1 KiB more stack than with the profiler off (${mimallocLabel})`, (t) => {
  const off = hostile(productionDir, ['stack-depth'], { NOPROF: '1' });
  const on = hostile(productionDir, ['stack-depth']);
  ok(off, 'stack depth, profiler off');
  ok(on, 'stack depth, profiling');
  const added = on.kv.num('sampled_stack') - off.kv.num('sampled_stack');
  t.diagnostic(`1 MiB malloc: ${on.kv.num('sampled_stack')} bytes sampled, ${off.kv.num('sampled_stack')} with the profiler off (+${added})`);
  assert.ok(added <= 1024, `a sample adds ${added} bytes of stack`);
});

/** Static TLS (every loaded object's, glibc and musl alike) is carved from each thread's stack
 * allocation: a preloaded library takes it from every thread, profiling or not. A budget of
 * 512 bytes: the core-round2 review's n1 program (a PTHREAD_STACK_MIN thread filled to within
 * 1 KiB, then a lazily bound malloc) survived without the library and died with it when the
 * library's TLS was 732 bytes (four whole siginfo_t held for signals, signals.c); it survives at
 * 412 (−384 bytes of room here, −448 with mimalloc 3's own TLS). */
const TLS_ROOM_BUDGET = 512;
/** The debug pass (scripts/run-tests.mjs) runs these gates on build/debug, whose lock records
 * (util.c, MP_DEBUG_ON) are 772 more bytes of TLS: the budget is the production build's. */
const DEBUG_BUILD = basename(productionDir) === 'debug' && 'the debug build keeps its lock records in TLS: the budget is the production build\'s';

function stackRoom(preload?: string): number {
  const r = runTarget(plainFixture('stack-room'), [], preload ? { LD_PRELOAD: preload } : {}, TIMEOUT_MS);
  assert.equal(r.status, 0, `stack-room${preload ? ` under ${preload}` : ''}: status ${r.status}\n${r.stderr}`);
  return new KV(r.stdout).num('room');
}

test(`a new thread's stack keeps all but ${TLS_ROOM_BUDGET} bytes of its room with the library loaded (${mimallocLabel})`, { skip: DEBUG_BUILD }, (t) => {
  const lib = join(productionDir, 'libmimalloc-pprof.so');
  const alone = stackRoom();
  const loaded = stackRoom(lib);
  t.diagnostic(`PTHREAD_STACK_MIN thread: ${alone} bytes of room alone, ${loaded} with the library (−${alone - loaded})`);
  assert.ok(alone - loaded <= TLS_ROOM_BUDGET, `the library takes ${alone - loaded} bytes of every thread's stack`);
});

test('positive control: a ballast library preloaded beside it, 768 more bytes of static TLS, exceeds the budget', { skip: DEBUG_BUILD }, (t) => {
  const alone = stackRoom();
  const ballast = stackRoom(`${join(productionDir, 'libmimalloc-pprof.so')} ${plainFixture('tls-ballast', { shared: true })}`);
  t.diagnostic(`with the ballast: −${alone - ballast}`);
  assert.ok(alone - ballast > TLS_ROOM_BUDGET);
});

test('positive control: 8 KiB of scratch on the stack (MP_TEST_STACK_HOG=1) fails all three stack cases', () => {
  const hooks = buildTestHooks();
  const small = hostile(hooks, ['small-stack', '6'], { MP_TEST_STACK_HOG: '1' });
  assert.equal(small.signal, 'SIGSEGV', `small stack: status ${small.status} signal ${small.signal}`);
  const alt = hostile(hooks, ['altstack'], { MP_TEST_STACK_HOG: '1' });
  assert.equal(alt.signal, 'SIGSEGV', `altstack: status ${alt.status} signal ${alt.signal}`);
  const off = hostile(hooks, ['stack-depth'], { NOPROF: '1' });
  const hog = hostile(hooks, ['stack-depth'], { MP_TEST_STACK_HOG: '1' });
  assert.ok(hog.kv.num('sampled_stack') - off.kv.num('sampled_stack') > 1024);
});

test(`fork storm while threads sample: no child holds a descriptor the program did not open (${mimallocLabel})`, (t) => {
  const r = hostile(productionDir, ['fork-fds', '1000']);
  ok(r, 'fork-fds');
  t.diagnostic(`${r.kv.num('foreign')} of ${r.kv.num('forks')} children held one`);
  assert.equal(r.kv.num('foreign'), 0);
});

test('positive control: a sample that holds a descriptor (MP_TEST_SAMPLE_OPEN=1) leaves it to children', (t) => {
  const r = hostile(buildTestHooks(), ['fork-fds', '1000'], { MP_TEST_SAMPLE_OPEN: '1' });
  ok(r, 'fork-fds control');
  t.diagnostic(`${r.kv.num('foreign')} of ${r.kv.num('forks')} children held one`);
  assert.ok(r.kv.num('foreign') > 0);
});
