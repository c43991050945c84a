/** The memory-events API (native/include/mimalloc-pprof/memory-events.h, native/src/events.c,
 * unwrapped.c), from a program that links the library the way a C user does: headers from
 * `mimalloc-pprof include` (the original's `#include <mimalloc/memory-events.h>` unchanged),
 * flags from `pkg-config` with `mimalloc-pprof pkg-config-path`. Counters are exact in usable
 * bytes (a 1000-byte request counts malloc_usable_size, 1024 on mimalloc). Each mechanism's
 * check has a positive control in the test-hooks build. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { buildDir, root } from '../helpers.js';
import { libDir, mimallocLabel, mimallocLinkFlags, targetCC } from '../mimalloc.js';
import { buildTestHooks, KV, runUnder } from '../reliability/util.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const say = (args: string[]) => {
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
};

test('include and pkg-config-path print folders that hold the headers and mimalloc-pprof.pc', () => {
  const include = say(['include']);
  assert.ok(existsSync(join(include, 'mimalloc-pprof', 'memory-events.h')));
  assert.ok(existsSync(join(include, 'mimalloc', 'memory-events.h')), 'the original include path');
  const pc = say(['pkg-config-path']);
  assert.ok(existsSync(join(pc, 'mimalloc-pprof.pc')));
  const flags = spawnSync('pkg-config', ['--cflags', '--libs', 'mimalloc-pprof'], { encoding: 'utf8', env: { ...process.env, PKG_CONFIG_PATH: pc } });
  assert.equal(flags.status, 0, flags.stderr);
  assert.ok(flags.stdout.includes(`-I${include}`), flags.stdout);
  assert.match(flags.stdout, /-lmimalloc-pprof/);
});

/** test/native/fixtures/events.c built with pkg-config's flags, linked to the library in libDir. */
function fixture(): string {
  const out = join(buildDir, `events-${libDir === join(root, 'build') ? 'system' : 'other'}`);
  mkdirSync(buildDir, { recursive: true });
  const pc = spawnSync('pkg-config', ['--cflags', '--libs', 'mimalloc-pprof'], { encoding: 'utf8', env: { ...process.env, PKG_CONFIG_PATH: say(['pkg-config-path']) } });
  assert.equal(pc.status, 0, pc.stderr);
  const flags = pc.stdout.trim().split(/\s+/);
  // the target's compiler (the musl pass: musl-gcc), and the library under test named before
  // pkg-config's folder (the other passes build it elsewhere: against another mimalloc, or
  // against musl, whose loader would otherwise find the build/ library by the rpath)
  const r = spawnSync(targetCC, ['-std=gnu11', '-O1', '-g', '-Wall', '-Wextra', '-Werror', '-fno-builtin-malloc', '-fno-builtin-free',
    '-fno-builtin-calloc', '-fno-builtin-realloc', join(root, 'test', 'native', 'fixtures', 'events.c'), '-o', out,
    `-L${libDir}`, `-Wl,-rpath,${libDir}`, ...flags, ...mimallocLinkFlags, '-lpthread'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return out;
}

const bin = fixture();
const run = (args: string[], env: Record<string, string> = {}, lib = libDir) => {
  const r = runUnder(lib, bin, args, env, 120_000);
  assert.equal(r.status, 0, `${r.status} ${r.signal} ${r.stderr}`);
  return new KV(r.stdout);
};

test(`the original README's example builds unchanged and its snapshot succeeds (${mimallocLabel})`, (t) => {
  for (const env of [{}, { MIMALLOC_MEMORY_EVENTS: '1' }] as Record<string, string>[]) {
    const kv = run(['readme'], env);
    t.diagnostic(`${JSON.stringify(env)}: live ${kv.num('live_bytes')}, accum ${kv.num('accum_bytes')}`);
    // tracking starts where the example switches it on (or at load): nothing of this plain C
    // program is live yet, since its runtime allocates its stdio buffer at the first printf
    assert.equal(kv.num('live_bytes'), 0);
    assert.ok(kv.num('accum_bytes') >= kv.num('live_bytes'));
  }
});

test('1000 blocks of 1000 bytes, half freed: live and accumulated bytes exact', (t) => {
  const kv = run(['exact']);
  t.diagnostic(`live +${kv.num('live_delta')} (500 blocks of ${kv.num('live_expected') / 500} usable bytes), accum +${kv.num('accum_delta')}`);
  assert.equal(kv.num('live_delta'), kv.num('live_expected'));
  assert.equal(kv.num('accum_delta'), kv.num('accum_expected'));
  assert.equal(kv.num('live_count_delta'), 500);
  assert.equal(kv.num('accum_count_delta'), 1000);
  assert.ok(kv.num('live_bytes') >= 500_000 && kv.num('accum_bytes') >= 1_000_000);
});

const expectCallbacks = (kv: KV) => {
  assert.equal(kv.num('allocate'), kv.num('expected_allocate'), 'ALLOCATE events');
  assert.equal(kv.num('resize'), kv.num('expected_resize'), 'RESIZE events');
  assert.equal(kv.num('free'), kv.num('expected_free'), 'FREE events');
  // the callback's own blocks (allocated and freed inside it) are counted, not reported
  assert.equal(kv.num('delta_sum'), kv.num('live_delta'), 'the deltas add up to the live counter');
  assert.equal(kv.num('grown_sum') + kv.num('scratch_bytes'), kv.num('accum_delta'), 'allocations and growth add up to the accumulated bytes');
  assert.equal(kv.num('allocate') + kv.num('scratch_count'), kv.num('accum_count_delta'));
  assert.equal(kv.num('scratch_count'), kv.num('allocate'), 'the callback allocated once per reported allocation');
  assert.equal(kv.num('bad_request'), 0, 'request_size is 0 exactly for frees');
};

test('callbacks on 4 threads see every change once and agree with the counters; their own allocations are counted, never reported', (t) => {
  const kv = run(['callbacks', '4', '20000']);
  t.diagnostic(`allocate ${kv.num('allocate')}, resize ${kv.num('resize')}, free ${kv.num('free')}; accum +${kv.num('accum_delta')}`);
  expectCallbacks(kv);
});

test('positive control: without the callbacks\' suppression (MP_TEST_EVENTS_NO_SUPPRESS=1) the counts disagree', () => {
  const kv = run(['callbacks', '4', '20000'], { MP_TEST_EVENTS_NO_SUPPRESS: '1' }, buildTestHooks());
  assert.throws(() => expectCallbacks(kv));
});

test('the visitor finds the calling thread\'s live blocks with their usable sizes, and stops when told', () => {
  const kv = run(['visit']);
  assert.equal(kv.num('visit'), 1);
  assert.equal(kv.num('found'), 100);
  assert.equal(kv.num('size_ok'), 100);
  assert.equal(kv.num('stopped'), 1);
  assert.equal(kv.num('stop_after'), 0, 'three calls, then the walk stopped');
  assert.equal(kv.num('null_refused'), 1);
});

// With the profiler on at a long interval the threads hold long countdowns, so only the
// resync that switching tracking on sends every thread makes their next allocation count.
const PROFILING = { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1g' };

test('tracking switched on at run time counts every thread exactly from then on', (t) => {
  const kv = run(['runtime', '4', '1000'], PROFILING);
  t.diagnostic(`counted ${kv.num('accum_count_delta')} of ${kv.num('expected')}`);
  assert.equal(kv.num('enabled'), 1);
  assert.equal(kv.num('accum_count_delta'), kv.num('expected'));
  assert.equal(kv.num('live_count_delta'), kv.num('expected'));
});

test('positive control: without the resync (MP_TEST_SKIP_RESYNC=1) the run-time count is short', () => {
  const kv = run(['runtime', '4', '1000'], { ...PROFILING, MP_TEST_SKIP_RESYNC: '1' }, buildTestHooks());
  assert.ok(kv.num('accum_count_delta') < kv.num('expected'), `${kv.num('accum_count_delta')} of ${kv.num('expected')}`);
});

test('mi_unwrapped_*: aligned, contents kept across realloc, bad alignment refused, nothing counted', () => {
  const kv = run(['unwrapped']);
  assert.equal(kv.num('bad'), 0);
  assert.equal(kv.num('einval'), 1);
  assert.equal(kv.num('null_ok'), 1);
  assert.equal(kv.num('live_delta'), 0);
  assert.equal(kv.num('accum_delta'), 0);
});

test('a window counts exactly the blocks allocated since it opened that are still live, on 4 threads, whatever older blocks they free', (t) => {
  // sampled blocks too (a 4 KiB interval): they count what the same request unsampled has
  for (const env of [{}, { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096' }] as Record<string, string>[]) {
    const kv = run(['window', '4', '20000'], env);
    t.diagnostic(`${JSON.stringify(env)}: window ${kv.num('window_bytes')} bytes in ${kv.num('window_count')} blocks; kept ${kv.num('kept_bytes')}; process-wide change ${kv.num('process_live_delta')}`);
    assert.equal(kv.num('open_untracked'), 0, 'no window without tracking');
    assert.equal(kv.num('close_unopened'), 0);
    assert.equal(kv.num('opened'), 1);
    assert.equal(kv.num('read_ok'), 1);
    assert.equal(kv.num('closed_ok'), 1);
    assert.equal(kv.num('overflowed'), 0);
    assert.equal(kv.num('window_bytes'), kv.num('kept_bytes'));
    assert.equal(kv.num('window_count'), kv.num('kept_count'));
    assert.equal(kv.num('read_bytes'), kv.num('window_bytes'));
    // the control: the process-wide change over the same moments, which the old blocks' frees
    // lower, fails the same comparison
    assert.ok(kv.num('process_live_delta') < kv.num('kept_bytes') - 1_000_000, `process-wide ${kv.num('process_live_delta')}`);
    // a window that meets more live blocks than its set holds: full at 3/4 of 2^19 slots, said
    // so, and every member freed leaves it empty
    assert.equal(kv.num('full_opened'), 1);
    assert.equal(kv.num('full_count'), 393216);
    assert.equal(kv.num('full_overflowed'), 1);
    assert.equal(kv.num('emptied_count'), 0);
    assert.equal(kv.num('emptied_bytes'), 0);
  }
});
