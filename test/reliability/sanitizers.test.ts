/** Gate 3, sanitizers (docs/reliability.md): the native test suite's fixtures, and the
 * reliability gates' own, rebuilt with AddressSanitizer and UndefinedBehaviorSanitizer (clang)
 * and run clean through the suite's scenarios.
 *
 * ASan's allocator must stay the program's, so nothing is preloaded: the library's sources are
 * compiled into each program (native/Makefile `sanitize`), with every libc and C++ name the
 * library exports renamed mp_san_<name> in the library's objects and in the fixture's own
 * (objcopy). The fixture's malloc, free, new, pthread_create... reach the library's entry
 * points exactly as under the preload, which forward to the system mimalloc; libc's own
 * allocations stay ASan's; and in this build the profiler's memory comes from ASan
 * (osmem.c, MP_SANITIZE), so its tables and writers are checked for overflows, use after
 * free and leaks. The degenerate-argument fixture must print exactly what it prints under
 * the preload: the interposer's semantics are the same code.
 * Controls: a planted use-after-free of a released snapshot is reported by ASan (matched on
 * its report format), and a planted signed overflow by UBSan. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { fixture, root, runPreloaded, tempDir } from '../helpers.js';
import { mimallocDefectEnv } from '../mimalloc.js';
import { ASAN_REPORT, fixturesDir, SANITIZER_REPORT, sanitizedProgram } from './util.js';

const native = (f: string) => join(root, 'test', 'native', 'fixtures', f);
const reliability = (f: string) => join(fixturesDir, f);

const SAN_ENV = {
  ASAN_OPTIONS: 'detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:check_initialization_order=1',
  UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1',
};

interface SanRun {
  status: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  reports: string[];
}

function runSanitized(bin: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): SanRun {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && !k.startsWith('MP_TEST_') && k !== 'LD_PRELOAD'));
  const r = spawnSync(bin, args, { encoding: 'utf8', env: { ...clean, ...SAN_ENV, ...env }, timeout: timeoutMs, maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  const reports = [...(r.stderr ?? '').matchAll(SANITIZER_REPORT)].map((m) => m[0]);
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr, reports };
}

interface Case {
  name: string;
  src: string;
  args: (dir: string) => string[];
  env?: Record<string, string> | ((dir: string) => Record<string, string>);
}

const PROF = { MIMALLOC_PROF: '1' };
const CASES: Case[] = [
  // test/native/api.test.ts
  { name: 'api stats, invalid interval', src: native('api.c'), args: () => ['stats'], env: { ...PROF, MIMALLOC_PROF_SAMPLE_INTERVAL: 'abc' } },
  { name: 'api mark, verbose', src: native('api.c'), args: () => ['mark'], env: { ...PROF, MIMALLOC_PROF_VERBOSE: '1' } },
  { name: 'api start_twice', src: native('api.c'), args: () => ['start_twice'] },
  { name: 'api stop_discards', src: native('api.c'), args: () => ['stop_discards'] },
  { name: 'api reset env', src: native('api.c'), args: () => ['reset', 'env'], env: { MIMALLOC_PROF_ACCUM: '1', MIMALLOC_MEMORY_EVENTS: '1' } },
  { name: 'api reset ex', src: native('api.c'), args: () => ['reset', 'ex'], env: { MIMALLOC_MEMORY_EVENTS: '1' } },
  { name: 'api start_ex_bad', src: native('api.c'), args: () => ['start_ex_bad'] },
  { name: 'api start_ex', src: native('api.c'), args: (d) => ['start_ex', 'override', '0', '10', '65536', '40', '3', join(d, 's.heap')] },
  { name: 'api stats_bad', src: native('api.c'), args: () => ['stats_bad'] },
  { name: 'api dump text', src: native('api.c'), args: (d) => ['dump', join(d, 'p.%p.heap'), 'text'] },
  { name: 'api dump proto', src: native('api.c'), args: (d) => ['dump', join(d, 'p.%p.pb'), 'proto'] },
  { name: 'api dump over RLIMIT_FSIZE', src: native('api.c'), args: (d) => ['dump', join(d, 'f.heap'), 'text', '100'] },
  {
    name: 'api workload, dump at exit',
    src: native('api.c'),
    args: () => ['workload'],
    env: (d) => ({ ...PROF, MIMALLOC_PROF_DUMP_FORMAT: 'proto', MIMALLOC_PROF_DUMP_AT_EXIT: join(d, 'x.%p.pb') }),
  },
  { name: 'api stacks depth 128', src: native('api.c'), args: (d) => ['stacks', '60', '2', join(d, 'st.heap')], env: { ...PROF, MIMALLOC_PROF_SAMPLE_INTERVAL: '1', MIMALLOC_PROF_BT_MAX: '128' } },
  { name: 'api events env', src: native('api.c'), args: () => ['events', 'env'], env: { MIMALLOC_MEMORY_EVENTS: '1' } },
  { name: 'api events runtime', src: native('api.c'), args: () => ['events', 'runtime'] },
  { name: 'api stacks over a 64 KiB budget', src: native('api.c'), args: () => ['stacks', '40', '20'], env: { ...PROF, MIMALLOC_PROF_SAMPLE_INTERVAL: '1', MIMALLOC_PROF_MAX_BYTES: '64k' } },
  // test/native/proto.test.ts, sampling.test.ts
  { name: 'sites', src: native('sites.c'), args: (d) => [join(d, 's.heap'), join(d, 's.pb'), '0.05'], env: { ...PROF, MIMALLOC_PROF_SAMPLE_INTERVAL: '16384', MIMALLOC_PROF_ACCUM: '1', MIMALLOC_MEMORY_EVENTS: '1' } },
  { name: 'unbiased', src: native('unbiased.c'), args: (d) => ['300', join(d, 'u.heap')], env: { ...PROF, MIMALLOC_PROF_SEED: '3' } },
  { name: 'newsite (C++ operator new)', src: native('newsite.cc'), args: (d) => [join(d, 'n.pb')] },
  // test/native/stress.test.ts
  { name: 'stress', src: native('stress.c'), args: (d) => [d, '2'], env: mimallocDefectEnv() },
  // the reliability gates' fixtures, smaller
  { name: 'churn', src: reliability('churn.c'), args: () => ['400', '8', '4096'] },
  { name: 'forks', src: reliability('forks.c'), args: (d) => ['20', d, '20000'] },
  { name: 'dumps unwritable', src: reliability('dumps.c'), args: (d) => ['unwritable', d] },
  { name: 'dumps fsize', src: reliability('dumps.c'), args: (d) => ['fsize', d] },
  { name: 'dumps threads', src: reliability('dumps.c'), args: (d) => ['threads', d, '1'] },
  // not `dumps fork`: in this build a dump's scratch memory comes from ASan's allocator outside
  // any lock fork's handlers take, and clang 14's ASan allocator is not fork-safe while another
  // thread allocates (a child can inherit its lock held); the dump gate runs it on the library
  { name: 'workload', src: reliability('workload.c'), args: (d) => [d] },
];

test(`sanitizers: ${CASES.length} runs of the native and reliability fixtures under ASan and UBSan are clean`, (t) => {
  const started = performance.now();
  const dirty: string[] = [];
  for (const c of CASES) {
    const bin = sanitizedProgram('sanitize', c.src);
    const dir = tempDir('mpp-san-');
    const r = runSanitized(bin, c.args(dir), typeof c.env === 'function' ? c.env(dir) : c.env);
    const ok = r.status === 0 && r.signal === null && r.reports.length === 0;
    if (!ok) dirty.push(`${c.name}: exit ${r.status} signal ${r.signal}\n${r.reports.join('\n')}\n${r.stderr.slice(-3000)}`);
  }
  t.diagnostic(`sanitizers: ${CASES.length - dirty.length} of ${CASES.length} runs clean (ASan with LeakSanitizer, UBSan) in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  assert.deepEqual(dirty, []);
});

test('sanitizers: the degenerate-argument fixture prints under ASan exactly what it prints under the preload', () => {
  const san = sanitizedProgram('sanitize', native('degenerate.c'));
  const modes: Record<string, string>[] = [{}, { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1' }, { MIMALLOC_MEMORY_EVENTS: '1' }];
  for (const env of modes) {
    const r = runSanitized(san, [], env);
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(r.reports, []);
    const preloaded = runPreloaded(fixture('degenerate'), [], env, 20_000);
    assert.equal(preloaded.status, 0, preloaded.stderr);
    assert.equal(r.stdout, preloaded.stdout, `mode ${JSON.stringify(env)}`);
  }
});

test('positive control: ASan reports a planted use-after-free of the profiler\'s own memory', (t) => {
  const bin = sanitizedProgram('sanitize', reliability('san-control.c'), { internal: true });
  const clean = runSanitized(bin, ['clean']);
  assert.equal(clean.status, 0, clean.stderr);
  assert.deepEqual(clean.reports, [], 'the control program is clean without its planted bug');
  const r = runSanitized(bin, ['uaf']);
  const matched = [...r.stderr.matchAll(ASAN_REPORT)].map((m) => m[0]);
  for (const line of matched) t.diagnostic(`control caught: ${line}`);
  assert.notEqual(r.status, 0);
  assert.ok(matched.some((l) => /^(==\d+==)?ERROR: AddressSanitizer: heap-use-after-free /.test(l)), r.stderr.slice(0, 2000));
  assert.ok(/^\s+#\d+ .* in mp_snapshot_free /m.test(r.stderr), 'the report names the release (mp_snapshot_free)');
});

test('positive control: UBSan reports a planted signed overflow', (t) => {
  const bin = sanitizedProgram('sanitize', reliability('san-control.c'), { internal: true });
  const r = runSanitized(bin, ['ubsan']);
  for (const line of r.reports) t.diagnostic(`control caught: ${line}`);
  assert.notEqual(r.status, 0);
  assert.ok(r.reports.some((l) => /runtime error: signed integer overflow/.test(l)), r.stderr.slice(0, 2000));
  assert.ok(r.reports.some((l) => /^SUMMARY: UndefinedBehaviorSanitizer: /.test(l)), r.stderr.slice(0, 2000));
});
