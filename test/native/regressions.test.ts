/** Regression tests for the C core's confirmed defects (an outside review's reproducers,
 * rewritten as fixtures): threads that end without the pthread_create wrapper, signals
 * landing inside the profiler, restarts with another interval, exact counters switched on
 * at run time, interval 1, dumps over the memory budget, posix_memalign's frame chain, the
 * library's own frames, dlopen, and an arena size of 0. They run against both mimalloc
 * majors (scripts/run-tests.mjs). Where a test checks a mechanism, its positive control
 * switches that mechanism off in the test-hooks build (native/Makefile `test-hooks`) and
 * shows that the same check then fails. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { buildDir, fixture, parseHeapText, runPreloaded, targetArgv, tempDir, weight } from '../helpers.js';
import { firstPass, libDir, mimallocLabel, onCross, onMusl, targetCC, targetObjdump, targetTrue } from '../mimalloc.js';
import { buildTestHooks, KV, runUnder as runUnderAny } from '../reliability/util.js';

const LIB = join(libDir, 'libmimalloc-pprof.so');
/** The fixtures' allocations must happen: gcc deletes malloc/free pairs and blocks it can
 * see are never read. */
const NO_BUILTIN = ['-fno-builtin-malloc', '-fno-builtin-free', '-fno-builtin-calloc', '-fno-builtin-realloc'];
const build = (name: string, flags: string[] = [], variant = '') => fixture(name, { flags: [...NO_BUILTIN, ...flags], variant });
/** runUnder, the fixtures' own link to the library (DT_NEEDED libmimalloc-pprof.so, found by
 * their rpath in the production folder) resolved to the preloaded build. glibc's loader takes
 * the preloaded library for it by its soname; musl's matches files only, and would load the
 * production build beside a preloaded test-hooks build: two copies of the library. */
const runUnder: typeof runUnderAny = (lib, cmd, args, env = {}, timeoutMs) =>
  runUnderAny(lib, cmd, args, onMusl ? { LD_LIBRARY_PATH: lib, ...env } : env, timeoutMs);

test(`threads that end without the wrapper (C11 threads, main thread pthread_exit): late samples are dropped and never register the ending thread again (${mimallocLabel})`, (t) => {
  const bin = build('thread_exit');
  const c11 = runPreloaded(bin, ['c11'], {}, 60_000);
  t.diagnostic(`c11: status ${c11.status} signal ${c11.signal}: ${c11.stdout.trim().replace(/\n/g, ' ')}`);
  assert.equal(c11.signal, null, c11.stderr);
  assert.equal(c11.status, 0, c11.stderr);
  // every late allocation (200 threads x 64 blocks of 1 MiB at R = 4 KiB, p = 1 - e^-256) is
  // a sample on an exiting thread: each is dropped
  assert.equal(new KV(c11.stdout).num('dropped'), 200 * 64);
  const main = runPreloaded(bin, ['main'], {}, 60_000);
  t.diagnostic(`main: status ${main.status} signal ${main.signal}: ${main.stdout.trim().replace(/\n/g, ' ')}`);
  assert.equal(main.signal, null, main.stderr);
  assert.equal(main.status, 0, main.stderr);
  const kv = new KV(main.stdout);
  assert.equal(kv.str('worker'), 'done');
  assert.equal(kv.num('dropped'), 64);
});

test('positive control: with the thread-exit destructor skipped (MP_TEST_SKIP_THREAD_EXIT=1) late samples are not dropped', (t) => {
  const hooks = buildTestHooks();
  const bin = build('thread_exit');
  const r = runUnder(hooks, bin, ['c11'], { MP_TEST_SKIP_THREAD_EXIT: '1' }, 60_000);
  t.diagnostic(`status ${r.status} signal ${r.signal}: ${r.stdout.trim().replace(/\n/g, ' ')}`);
  // either the process crashes (the thread registered again after its end), or the samples
  // are taken (not dropped)
  const dropped = r.status === 0 ? new KV(r.stdout).num('dropped') : -1;
  assert.ok(r.signal !== null || r.status !== 0 || dropped !== 200 * 64, 'the check above would not have caught a skipped exit');
});

/** A restart at `interval`: the worker's countdown from the 1 TiB session must not survive. */
function restartRun(lib: string, env: Record<string, string> = {}) {
  const r = runUnder(lib, build('restart'), ['4096'], env, 60_000);
  assert.equal(r.status, 0, r.stderr);
  const kv = new KV(r.stdout);
  const n = kv.num('true_objects');
  const size = kv.num('size');
  const interval = kv.num('interval');
  const p = 1 / weight(size, interval);
  // Each block is sampled independently with probability p and weighs 1/p: the estimate of
  // the count has variance n (1 - p) / p. 5 sigma: a false alarm about once in 1.7 million.
  const sigma = Math.sqrt((n * (1 - p)) / p);
  return { n, est: kv.num('estimated_objects'), sigma };
}

test('a restart with another interval reaches every thread: the estimate after stop/start is unbiased', (t) => {
  const { n, est, sigma } = restartRun(libDir);
  t.diagnostic(`true ${n}, estimated ${est.toFixed(0)}, 5 sigma = ${(5 * sigma).toFixed(0)}`);
  assert.ok(Math.abs(est - n) < 5 * sigma, `estimate ${est} vs ${n} (5 sigma ${5 * sigma})`);
});

test('positive control: without the resync (MP_TEST_SKIP_RESYNC=1) the same check fails', (t) => {
  const { n, est, sigma } = restartRun(buildTestHooks(), { MP_TEST_SKIP_RESYNC: '1' });
  t.diagnostic(`true ${n}, estimated ${est.toFixed(0)}`);
  assert.ok(Math.abs(est - n) >= 5 * sigma);
});

function eventsRun(lib: string, env: Record<string, string> = {}) {
  const r = runUnder(lib, build('events_runtime'), [], env, 30_000);
  assert.equal(r.status, 0, r.stderr);
  return new KV(r.stdout);
}

test('exact counters switched on at run time count every thread from then on', (t) => {
  const kv = eventsRun(libDir);
  t.diagnostic(kv.text.trim().replace(/\n/g, ' '));
  // two threads, each: 1000 balanced pairs, then 100 live blocks
  assert.equal(kv.num('exact_live_objects'), 200);
  assert.equal(kv.num('exact_accum_objects'), 2200);
  assert.equal(kv.num('exact_live_bytes'), 200 * kv.num('usable_64'));
});

test('positive control: without the resync (MP_TEST_SKIP_RESYNC=1) the counters are wrong', () => {
  const kv = eventsRun(buildTestHooks(), { MP_TEST_SKIP_RESYNC: '1' });
  assert.notEqual(kv.num('exact_accum_objects'), 2200);
});

function eventsStop(lib: string, env: Record<string, string> = {}) {
  const r = runUnder(lib, build('events_stop'), [], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1', MIMALLOC_MEMORY_EVENTS: '1', ...env }, 30_000);
  assert.equal(r.status, 0, r.stderr);
  return new KV(r.stdout);
}

test(`sampled blocks of a larger size class count as unsampled, and the exact counters survive a stop (${mimallocLabel})`, (t) => {
  const kv = eventsStop(libDir);
  t.diagnostic(kv.text.trim().replace(/\n/g, ' '));
  const N = 1000;
  assert.equal(kv.num('live_samples'), N); // interval 1: every block sampled
  assert.equal(kv.num('placed'), N); // ... and placed where free's filter looks
  // while recorded: what an unsampled 100-B block has, to the byte
  assert.equal(kv.num('usable'), N * kv.num('unsampled'));
  assert.equal(kv.num('live1') - kv.num('live0'), kv.num('usable'));
  // after the stop the blocks count their whole mimalloc blocks, in the counters as in
  // malloc_usable_size (the case this test is for: they took a larger size class)
  assert.ok(kv.num('usable_after_stop') > kv.num('usable'), 'the blocks did not take a larger size class');
  assert.equal(kv.num('live2') - kv.num('live0'), kv.num('usable_after_stop'));
  // the frees after the stop bring the live figures back
  assert.equal(kv.num('live3'), kv.num('live0'));
  assert.equal(kv.num('objects3'), kv.num('objects0'));
});

test('positive control: a stop that drops the blocks\' larger sizes (MP_TEST_STOP_DROPS_WHOLE=1) leaves the live bytes wrong', () => {
  const kv = eventsStop(buildTestHooks(), { MP_TEST_STOP_DROPS_WHOLE: '1' });
  assert.equal(kv.num('live_samples'), 1000);
  assert.notEqual(kv.num('live3'), kv.num('live0'));
});

test(`stops racing frees of huge sampled blocks on four threads: no crash (${mimallocLabel})`, (t) => {
  const r = runUnder(libDir, build('stop_race'), ['500'], {}, 60_000);
  t.diagnostic(`status ${r.status} signal ${r.signal}`);
  assert.equal(r.signal, null, r.stderr);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'ok');
});

// The race is a matter of timing: most 500-stop runs of the control crash (7 of 8 on an idle
// machine with mimalloc 3.0.1), a loaded machine let three in a row through once and six in
// a row in CI, so the control has up to twenty runs to show it (the gate's one run of the fixed library must never crash).
// On musl one run crashes 17-51 % of the time (one run of twenty let all through): sixty there.
const STOP_RACE_TRIES = onMusl ? 60 : 20;
test(`positive control: a stop that narrows the filter before it drops the records (MP_TEST_STOP_NARROWS_FIRST=1) crashes (in one of at most ${STOP_RACE_TRIES} runs)`, (t) => {
  const ends: string[] = [];
  let caught = false;
  for (let i = 0; i < STOP_RACE_TRIES && !caught; i++) {
    const r = runUnder(buildTestHooks(), build('stop_race'), ['500'], { MP_TEST_STOP_NARROWS_FIRST: '1' }, 60_000);
    ends.push(`status ${r.status} signal ${r.signal}`);
    caught = r.signal !== null || r.status !== 0;
  }
  t.diagnostic(ends.join('; '));
  assert.ok(caught, 'the check above would not have caught the race');
});

test('interval 1 records every allocation with weight 1', (t) => {
  const r = runPreloaded(build('interval_one'), [], {}, 60_000);
  assert.equal(r.status, 0, r.stderr);
  const kv = new KV(r.stdout);
  t.diagnostic(kv.text.trim().replace(/\n/g, ' '));
  assert.equal(kv.num('live_samples'), kv.num('true_objects'));
  assert.equal(kv.num('estimated_objects'), kv.num('true_objects'));
});

test('a full profiler-memory budget still lets both formats be written, by hand and at exit', (t) => {
  const dir = tempDir();
  const env = { MIMALLOC_PROF_MAX_BYTES: '2m' };
  const r = runPreloaded(build('proto_budget'), [join(dir, 'a.heap'), join(dir, 'a.pb')], env, 60_000);
  assert.equal(r.status, 0, r.stderr);
  const kv = new KV(r.stdout);
  t.diagnostic(kv.text.trim().replace(/\n/g, ' '));
  assert.ok(kv.num('dropped') > 0, 'the budget was reached');
  assert.equal(kv.str('text'), 'ok');
  assert.equal(kv.str('proto'), 'ok');
  for (const format of ['text', 'proto']) {
    const out = join(dir, `exit.${format}`);
    const e = runPreloaded(build('proto_budget'), [join(dir, 'b.heap'), join(dir, 'b.pb')], {
      ...env,
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_SAMPLE_INTERVAL: '4096',
      MIMALLOC_PROF_DUMP_FORMAT: format,
      MIMALLOC_PROF_DUMP_AT_EXIT: out,
    }, 60_000);
    assert.equal(e.status, 0, e.stderr);
    assert.doesNotMatch(e.stderr, /cannot write/);
    assert.ok(existsSync(out) && statSync(out).size > 1000, `${format} at exit`);
  }
  const pprof = spawnSync('go', ['tool', 'pprof', '-raw', join(dir, 'a.pb')], { encoding: 'utf8' });
  assert.equal(pprof.status, 0, pprof.stderr);
});

test('posix_memalign keeps the caller frame chain: its stacks are as deep as aligned_alloc\'s through the same frames', (t) => {
  const bin = build('aligned_stacks', ['-fno-asynchronous-unwind-tables', '-fno-unwind-tables'], '-nocfi');
  const dir = tempDir();
  const r = runPreloaded(bin, [join(dir, 's.heap')], {}, 30_000);
  assert.equal(r.status, 0, r.stderr);
  const heap = parseHeapText(readFileSync(join(dir, 's.heap'), 'utf8'));
  const depths = heap.rows.map((row) => row.stack.length).sort();
  t.diagnostic(`row depths ${depths.join(', ')}`);
  assert.equal(heap.rows.length, 2, 'one row per leaf function');
  assert.equal(depths[0], depths[1], 'both leaves keep the whole chain');
  assert.ok(depths[0]! >= 4, 'leaf, middle, main and libc');
});

/** The target's call and tail jump (x86-64 `call`/`jmp`, aarch64 `bl`/`b`) to a slow path. */
const TO_SLOW = '\\s.*<mp_[a-z_]*_slow(?:@plt)?>';
const SLOW_CALL = new RegExp(`${onCross ? '\\sbl' : '\\bcall'}${TO_SLOW}`);
const SLOW_JUMP = new RegExp(`${onCross ? '\\sb' : '\\bjmp'}${TO_SLOW}`);

/** The target's disassembly of `object` (the arm64 pass's cross objdump). */
function disassembly(object: string): string {
  const dis = spawnSync(targetObjdump, ['-d', '--no-show-raw-insn', object], { encoding: 'utf8', maxBuffer: 64 << 20 });
  assert.equal(dis.status, 0, dis.stderr);
  assert.match(dis.stdout, onCross ? /file format elf64-littleaarch64/ : /file format elf64-x86-64/);
  return dis.stdout;
}

/** Every hop from an exported entry point to a slow path must be a tail jump (`jmp`, `b`),
 * so the slow path sees the caller's frame pointer (rbp, x29): a call gives it to the
 * compiler. Returns the offending call lines of a disassembly. */
function slowPathCalls(object: string): string[] {
  const bad: string[] = [];
  let fn = '';
  for (const line of disassembly(object).split('\n')) {
    const head = /^[0-9a-f]+ <([^>]+)>:$/.exec(line);
    if (head) fn = head[1]!;
    else if (SLOW_CALL.test(line) && !/^mp_[a-z_]*_slow$/.test(fn)) bad.push(`${fn}: ${line.trim()}`);
  }
  return bad;
}

test('entry points reach the slow paths only by tail jumps (the built library, disassembled)', (t) => {
  const bad = slowPathCalls(LIB);
  const jumps = disassembly(LIB).split('\n').filter((l) => SLOW_JUMP.test(l)).length;
  t.diagnostic(`${jumps} tail jumps to slow paths; ${bad.length === 0 ? 'no call to one outside the slow paths' : bad.join('\n')}`);
  assert.ok(jumps > 10, `${jumps} tail jumps found: the check reads this library's disassembly`);
  assert.deepEqual(bad, []);
});

test('positive control: the disassembly check flags an entry point that calls its slow path', () => {
  const dir = join(buildDir, 'entry-control');
  mkdirSync(dir, { recursive: true });
  const src = join(dir, 'planted.c');
  const obj = join(dir, 'planted.so');
  // the shape posix_memalign once had: the slow path's result is used after the call
  const code = `#include <errno.h>
#include <stddef.h>
__attribute__((noinline, noipa)) void* mp_alloc_slow(size_t n, size_t a, unsigned f, void* ra) { (void)a; (void)f; (void)ra; return (void*)n; }
int entry(void** out, size_t n) { int saved = errno; void* p = mp_alloc_slow(n, 64, 0, 0); errno = saved; *out = p; return p ? 0 : 12; }
`;
  writeFileSync(src, code);
  const cc = spawnSync(targetCC, ['-O2', '-fomit-frame-pointer', '-shared', '-fPIC', src, '-o', obj], { encoding: 'utf8' });
  assert.equal(cc.status, 0, cc.stderr);
  assert.equal(slowPathCalls(obj).length, 1);
});

test('no frame of the library itself in any stack (the thread wrapper stays out of profiles)', (t) => {
  const dir = tempDir();
  const r = runPreloaded(build('thread_frames'), [join(dir, 't.heap')], {}, 30_000);
  assert.equal(r.status, 0, r.stderr);
  const heap = parseHeapText(readFileSync(join(dir, 't.heap'), 'utf8'));
  const own = heap.maps
    .filter((m) => m.endsWith('libmimalloc-pprof.so'))
    .map((m) => m.split(/\s+/)[0]!.split('-').map((x) => BigInt(`0x${x}`)) as [bigint, bigint]);
  assert.ok(own.length > 0, 'the library is mapped');
  const frames = heap.rows.flatMap((row) => row.stack.map((a) => BigInt(a)));
  const inside = frames.filter((f) => own.some(([lo, hi]) => f >= lo && f < hi));
  t.diagnostic(`${heap.rows.length} rows, ${frames.length} frames, ${inside.length} in the library`);
  // one row for the worker's blocks, one for main's, and now and then a third: pthread_create's
  // own block for the thread's TLS (a calloc of a few hundred bytes, still live) sampled too
  assert.ok(heap.rows.length >= 2 && heap.rows.length <= 3, `${heap.rows.length} rows`);
  assert.ok(heap.rows.filter((row) => row.inuseBytes >= 32 << 20).length === 2, 'the 32 blocks of each thread in one row each');
  assert.deepEqual(inside, []);
});

test('a dlopen\'ed library refuses to start (ENOTSUP, said once) instead of recording nothing; on musl its loader refuses the library itself', () => {
  const r = spawnSync(...targetArgv(build('dlopened'), [LIB]), { encoding: 'utf8', timeout: 30_000 });
  if (onMusl) {
    // musl's loader refuses to dlopen a library with initial-exec TLS (the library's per-thread
    // state, read on every allocation): dlopen fails and nothing of the library runs
    assert.equal(r.status, 1, r.stderr);
    assert.match(new KV(r.stdout).str('dlopen'), /initial-exec TLS/);
  } else {
    assert.equal(r.status, 0, r.stderr);
    const kv = new KV(r.stdout);
    assert.equal(kv.str('start'), '0');
    assert.match(kv.str('errno'), /not supported/i);
    assert.match(r.stderr, /malloc is not interposed/);
  }
  // the control: preloaded, the same start succeeds
  const pre = runPreloaded(build('dlopened'), [LIB], {}, 30_000);
  assert.equal(new KV(pre.stdout).str('start'), '1');
});

test(`MIMALLOC_PROF_VERBOSE=1 names the mimalloc in use, the one the library was built against (${mimallocLabel})`, (t) => {
  const r = runPreloaded(targetTrue(), [], { MIMALLOC_PROF_VERBOSE: '1' }, 30_000);
  const line = r.stderr.split('\n').find((l) => l.includes('mimalloc-pprof: mimalloc ')) ?? '';
  t.diagnostic(line);
  assert.match(line, /^mimalloc-pprof: mimalloc (\d+\.\d+\.\d+) \(built against \1, (linked in statically|from \/\S*mimalloc\S*)\); interposer active; /);
});

test('MIMALLOC_PROF_ARENA_SIZE=0 (or below the minimum) warns and keeps the default', () => {
  for (const value of ['0', '1m']) {
    const r = runPreloaded(targetTrue(), [], { MIMALLOC_PROF: '1', MIMALLOC_PROF_ARENA_SIZE: value, MIMALLOC_PROF_VERBOSE: '1' }, 30_000);
    assert.equal(r.status, 0);
    assert.match(r.stderr, new RegExp(`invalid value for MIMALLOC_PROF_ARENA_SIZE \\(ignored, using the default\\): ${value}`));
    assert.match(r.stderr, /profiler running/);
  }
});

// ---- signals landing inside the profiler: no hang ------------------------------------------------

const EXIT_RUNS = firstPass ? 6 : 3;
test(`exit() from a signal handler that interrupted the profiler ends the process (${EXIT_RUNS} runs, each within 10 s)`, (t) => {
  const bin = build('exit_in_handler');
  const env = { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '64', MIMALLOC_PROF_DUMP_AT_EXIT: join(tempDir(), 'x.heap') };
  let skipped = 0;
  for (let i = 0; i < EXIT_RUNS; i++) {
    const r = runUnder(libDir, bin, [], env, 10_000);
    assert.equal(r.timedOut, false, `run ${i} hung`);
    assert.equal(r.status, 0, r.stderr);
    if (/no profile written at exit/.test(r.stderr)) skipped++;
  }
  t.diagnostic(`${EXIT_RUNS} runs ended; ${skipped} skipped the exit dump because the handler interrupted the profiler`);
});

// Two defences stand between this fixture and a hang: the guard (an exit dump skipped where exit() interrupted the
// profiler) and the handler held back while the thread holds a profiler lock (native/src/signals.c hold_back). Either
// alone keeps it from hanging; the control turns both off.
test('positive control: without the reentrancy guard and the held-back handler (MP_TEST_SKIP_REENTRY_GUARD=1, MP_TEST_NO_SIGNAL_HOLD=1) the same run hangs', () => {
  const bin = build('exit_in_handler');
  const env = {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '64',
    MIMALLOC_PROF_DUMP_AT_EXIT: join(tempDir(), 'x.heap'),
    MP_TEST_SKIP_REENTRY_GUARD: '1',
    MP_TEST_NO_SIGNAL_HOLD: '1',
  };
  // the alarm lands inside the locked walk nearly always (6 of 6 here); 3 tries for a loaded machine
  let hung: ReturnType<typeof runUnder> | undefined;
  for (let i = 0; i < 3 && !hung; i++) {
    const r = runUnder(buildTestHooks(), bin, [], env, 10_000);
    if (r.timedOut) hung = r;
  }
  assert.ok(hung, 'the run hangs');
  // stuck inside the profiler outside a sample: the timeout's SIGTERM still ends it at once
  // (a signal is deferred only within a sampler section, native/src/signals.c)
  assert.equal(hung.signal, 'SIGTERM');
});

/** Ends of `runs` runs of a program SIGTERMed while nearly always inside the profiler, and
 * how many left a complete profile. */
function signalInProfiler(lib: string, runs: number, env: Record<string, string> = {}): { ends: string[]; profiles: number } {
  const bin = build('signal_in_profiler', ['-pthread']);
  const ends: string[] = [];
  let profiles = 0;
  for (let i = 0; i < runs; i++) {
    const out = join(tempDir(), 'p.heap');
    const r = runUnder(lib, bin, [], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1', MIMALLOC_PROF_DUMP_AT_EXIT: out, ...env }, 10_000);
    ends.push(r.timedOut ? 'hung' : (r.signal ?? `status ${r.status}`));
    if (existsSync(out) && /^heap profile:/.test(readFileSync(out, 'utf8')) && /MAPPED_LIBRARIES:/.test(readFileSync(out, 'utf8'))) profiles++;
  }
  return { ends, profiles };
}

test('SIGTERM landing inside the profiler: the process ends by SIGTERM and its profile is written, every time (8 runs)', (t) => {
  const { ends, profiles } = signalInProfiler(libDir, 8);
  t.diagnostic(`ends: ${ends.join(', ')}; profiles: ${profiles}`);
  assert.deepEqual(ends, Array(8).fill('SIGTERM'));
  assert.equal(profiles, 8);
});

test('positive control: without the deferral (MP_TEST_NO_SIGNAL_DEFER=1) runs end without a profile', (t) => {
  const { ends, profiles } = signalInProfiler(buildTestHooks(), 8, { MP_TEST_NO_SIGNAL_DEFER: '1' });
  t.diagnostic(`ends: ${ends.join(', ')}; profiles: ${profiles}`);
  assert.deepEqual(ends, Array(8).fill('SIGTERM'));
  assert.ok(profiles < 8, `${profiles} of 8 runs wrote a profile`);
});

/** Runs the fork loop under run's environment, sends SIGTERM after `delayMs`, and reports
 * how it ended (null when it had not ended 10 s later; it is then killed). */
function sigtermDuringFork(lib: string, delayMs: number, env: Record<string, string> = {}): Promise<string | null> {
  const dir = tempDir();
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && !k.startsWith('MP_TEST_')));
  const child = spawn(...targetArgv(build('sigterm_fork'), []), {
    env: {
      ...clean,
      LD_PRELOAD: join(lib, 'libmimalloc-pprof.so'),
      MIMALLOC_PPROF_RUN_DIR: dir,
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'p.%p.heap'),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  return new Promise((resolve) => {
    let hung: NodeJS.Timeout | undefined;
    child.stdout.once('data', () => {
      setTimeout(() => {
        child.kill('SIGTERM');
        hung = setTimeout(() => {
          child.kill('SIGKILL');
          resolve(null);
        }, 10_000);
      }, delayMs);
    });
    child.once('exit', (code, signal) => {
      if (hung) clearTimeout(hung);
      resolve(signal ?? `status ${code}`);
    });
  });
}

test('SIGTERM while the program forks under run\'s handler: it dies by SIGTERM, never hangs (6 tries)', async (t) => {
  const ends: (string | null)[] = [];
  for (let i = 0; i < 6; i++) ends.push(await sigtermDuringFork(libDir, 200 + 150 * i));
  t.diagnostic(`ends: ${ends.join(', ')}`);
  assert.deepEqual(ends, Array(6).fill('SIGTERM'));
});

test(`a thread's first sample inside its own pthread_getattr_np (Rust's and V8's start-up) does not deadlock (${mimallocLabel})`, (t) => {
  const bin = build('getattr');
  const r = runUnder(libDir, bin, [], {}, 20_000);
  t.diagnostic(`status ${r.status}, timed out ${r.timedOut}: ${r.stdout.trim()}`);
  assert.equal(r.timedOut, false, 'the program hung');
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'main=ok worker=ok');
});

test('positive control: stack bounds from pthread_getattr_np inside the sample (MP_TEST_BOUNDS_PTHREAD=1) hang the same program', (t) => {
  if (onMusl) {
    t.skip('musl: pthread_getattr_np neither allocates nor takes a lock (it reads the thread descriptor, or probes the main stack with mremap), so there is no hang to show');
    return;
  }
  const r = runUnder(buildTestHooks(), build('getattr'), [], { MP_TEST_BOUNDS_PTHREAD: '1' }, 10_000);
  assert.equal(r.timedOut, true, `status ${r.status}: the control did not hang`);
});
