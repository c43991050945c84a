/** Degenerate arguments behave as with glibc: malloc(0), free(NULL), SIZE_MAX, calloc
 * overflow, non-power-of-two alignments, realloc(p, 0), ...
 *
 * One fixture prints `case: result` per case. It runs on plain glibc (the positive control
 * that the table below really is glibc's behaviour), under the preload with the profiler
 * stopped (the fast paths), with the profiler at interval 1 (every allocation takes the
 * sampled path) and with exact counters on (every call takes the slow path). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

import { buildDir, fixture, runPreloaded, runTarget, type Run } from '../helpers.js';
import { onMusl, targetCC } from '../mimalloc.js';

/** The controls run the fixture without the library, on its C library's own allocator. */
const MUSL_NO_GLIBC =
  "musl: the control is plain glibc's own allocator, which a musl program does not have (musl's own differs, e.g. realloc(p, 0) and memalign(24, n))";

/** glibc's semantics, as of glibc 2.38 (the aligned_alloc change) and later. */
const EXPECTED: Readonly<Record<string, string>> = {
  // a successful call leaves errno alone, even the first one of the process
  first_malloc_16: 'nonnull errno=0',
  malloc_0: 'nonnull errno=0', // a unique pointer, not NULL
  free_null: 'errno=0',
  malloc_size_max: 'null errno=ENOMEM',
  malloc_ptrdiff_max_plus_1: 'null errno=ENOMEM', // glibc refuses anything above PTRDIFF_MAX
  calloc_overflow: 'null errno=ENOMEM',
  calloc_0_0: 'nonnull errno=0',
  calloc_100_3: 'nonnull errno=0 zeroed=yes',
  realloc_null_16: 'nonnull errno=0', // realloc(NULL, n) is malloc(n)
  realloc_null_0: 'nonnull errno=0', // ... even for n = 0
  realloc_p_0: 'null errno=0', // glibc frees p and returns NULL (REALLOC_ZERO_BYTES_FREES)
  realloc_p_size_max: 'null errno=ENOMEM p_intact=yes', // failure leaves p valid and unchanged
  realloc_grow: 'nonnull errno=0 kept=yes',
  reallocarray_overflow: 'null errno=ENOMEM p_intact=yes',
  // posix_memalign reports through its return value and leaves errno and *out alone
  posix_memalign_24: 'ret=EINVAL errno=0 out_untouched=yes', // not a power of two
  posix_memalign_0: 'ret=EINVAL errno=0 out_untouched=yes',
  posix_memalign_4: 'ret=EINVAL errno=0 out_untouched=yes', // not a multiple of sizeof(void*)
  posix_memalign_64: 'ret=0 errno=0 nonnull aligned=yes',
  posix_memalign_64_size_0: 'ret=0 errno=0 nonnull aligned=yes',
  posix_memalign_4096: 'ret=0 errno=0 nonnull aligned=yes',
  posix_memalign_64_size_max: 'ret=ENOMEM errno=0 out_untouched=yes',
  // glibc >= 2.38: a non-power-of-two alignment is EINVAL
  aligned_alloc_24_48: 'null errno=EINVAL',
  aligned_alloc_64_64: 'nonnull errno=0 aligned=yes',
  aligned_alloc_2p63_1: 'null errno=ENOMEM',
  memalign_24_10: 'nonnull errno=0 aligned32=yes', // rounded up to the next power of two
  memalign_8_10: 'nonnull errno=0 aligned16=yes', // small alignments are malloc's (16)
  memalign_100_10: 'nonnull errno=0 aligned128=yes',
  memalign_huge_align: 'null errno=EINVAL', // above SIZE_MAX/2+1: cannot be a power of two
  memalign_64_size_max: 'null errno=ENOMEM',
  valloc_1: 'nonnull errno=0 page_aligned=yes',
  pvalloc_1: 'nonnull errno=0 page_aligned=yes usable_ge_page=yes', // rounded up to a page
  pvalloc_size_max: 'null errno=ENOMEM',
  malloc_usable_size_null: 'value=0 errno=0',
  malloc_usable_size_ge_requested: 'yes',
  preloaded: 'yes', // the run really went through the preload library (mi_prof_* resolvable)
  profiler: 'stopped', // see MODE_EXPECTED
  done: 'yes',
};

/** Where a glibc older than 2.38 behaved differently (documented change in 2.38). */
const BEFORE_GLIBC_2_38: Readonly<Record<string, string>> = {
  aligned_alloc_24_48: 'nonnull errno=0', // aligned_alloc was memalign: 24 rounded up to 32
};

type Mode = 'glibc' | 'preload' | 'sampled' | 'events';

/** What each run is: the control has no library; `sampled` really profiles. */
const MODE_EXPECTED: Readonly<Record<Mode, Record<string, string>>> = {
  glibc: { preloaded: 'no', profiler: 'absent' },
  preload: {},
  sampled: { profiler: 'running' },
  events: {},
};

/** errno cases, also tested on their own below. */
const ERRNO_ON_IMPOSSIBLE_REQUEST = ['malloc_size_max', 'malloc_ptrdiff_max_plus_1', 'memalign_64_size_max'];
const ERRNO_ON_FIRST_ALLOCATION = ['first_malloc_16'];

/** The target's glibc (the arm64 pass's is its sysroot's, not this machine's), as a program
 * built for it says. */
function glibcVersion(): [number, number] {
  const out = join(buildDir, 'glibc-version');
  if (!existsSync(out)) {
    mkdirSync(buildDir, { recursive: true });
    const src = '#include <gnu/libc-version.h>\n#include <stdio.h>\nint main(void) { puts(gnu_get_libc_version()); return 0; }\n';
    const cc = spawnSync(targetCC, ['-x', 'c', '-', '-o', out], { input: src, encoding: 'utf8' });
    assert.equal(cc.status, 0, cc.stderr);
  }
  const r = runTarget(out, []);
  const m = /^(\d+)\.(\d+)/.exec(r.stdout);
  assert.ok(m, `gnu_get_libc_version: ${r.stdout} ${r.stderr}`);
  return [Number(m[1]), Number(m[2])];
}

function glibcBefore238(): boolean {
  const [major, minor] = glibcVersion();
  return major < 2 || (major === 2 && minor < 38);
}

function parse(r: Run, what: string): Map<string, string> {
  assert.equal(r.signal, null, `${what}: killed by ${r.signal}\n${r.stderr}`);
  assert.equal(r.status, 0, `${what}: exit ${r.status}\n${r.stderr}`);
  // neither mimalloc nor the profiler has anything to say about a caller's bad arguments
  assert.equal(r.stderr, '', `${what}: unexpected stderr`);
  const out = new Map<string, string>();
  for (const line of r.stdout.split('\n')) {
    if (line === '') continue;
    const m = /^([a-z0-9_]+): (.*)$/.exec(line);
    assert.ok(m, `${what}: bad line ${JSON.stringify(line)}`);
    assert.ok(!out.has(m[1]!), `${what}: case ${m[1]} printed twice`);
    out.set(m[1]!, m[2]!);
  }
  // every case ran, and nothing else was printed
  assert.deepEqual([...out.keys()].sort(), Object.keys(EXPECTED).sort(), `${what}: set of cases`);
  return out;
}

const MODE_ENV: Record<Exclude<Mode, 'glibc'>, Record<string, string>> = {
  preload: {},
  sampled: { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1' },
  events: { MIMALLOC_MEMORY_EVENTS: '1' },
};

const results = new Map<Mode, Map<string, string>>();
function results_of(mode: Mode): Map<string, string> {
  let r = results.get(mode);
  if (r === undefined) {
    if (mode === 'glibc') {
      // fixture() may link the library (as-needed): libc named first provides malloc, so the
      // control binary does not depend on the library; nothing is preloaded either
      const bin = fixture('degenerate', { variant: '-glibc', flags: ['-Wl,--no-as-needed', '-lc'] });
      r = parse(runTarget(bin, [], { LD_PRELOAD: '' }, 20_000), mode);
    } else {
      r = parse(runPreloaded(fixture('degenerate'), [], MODE_ENV[mode], 20_000), mode);
    }
    results.set(mode, r);
  }
  return r;
}

function expectedFor(name: string, mode: Mode): string {
  const special = MODE_EXPECTED[mode][name];
  if (special !== undefined) return special;
  if (mode === 'glibc' && glibcBefore238() && name in BEFORE_GLIBC_2_38) return BEFORE_GLIBC_2_38[name]!;
  return EXPECTED[name]!;
}

function checkCases(mode: Mode, names: string[]): void {
  const got = results_of(mode);
  const want = new Map(names.map((n) => [n, expectedFor(n, mode)]));
  const have = new Map(names.map((n) => [n, got.get(n)]));
  assert.deepEqual(have, want, `${mode}: cases differ from glibc's semantics`);
}

test('positive control: plain glibc agrees with the table (old aligned_alloc before 2.38)', { skip: onMusl && MUSL_NO_GLIBC }, () => {
  checkCases('glibc', Object.keys(EXPECTED));
});

test('positive control: the table differs from plain glibc where glibc changed', { skip: onMusl && MUSL_NO_GLIBC }, () => {
  // the aligned_alloc case really distinguishes old from new semantics on this machine
  const got = results_of('glibc').get('aligned_alloc_24_48');
  assert.equal(got, glibcBefore238() ? 'nonnull errno=0' : 'null errno=EINVAL');
});

const PRELOADED: Array<Exclude<Mode, 'glibc'>> = ['preload', 'sampled', 'events'];
const DESCRIPTION: Record<Exclude<Mode, 'glibc'>, string> = {
  preload: 'preload, profiler stopped',
  sampled: 'preload, profiling at interval 1 (every allocation sampled)',
  events: 'preload, exact counters on (every call on the slow path)',
};

for (const mode of PRELOADED) {
  test(`${DESCRIPTION[mode]}: degenerate arguments behave as glibc >= 2.38`, () => {
    checkCases(
      mode,
      Object.keys(EXPECTED),
    );
  });
}

test(
  'impossible requests (SIZE_MAX, > PTRDIFF_MAX) set errno to ENOMEM under the preload',
  () => {
    for (const mode of PRELOADED) checkCases(mode, ERRNO_ON_IMPOSSIBLE_REQUEST);
  },
);

test(
  "the process's first successful malloc leaves errno alone under the preload",
  () => {
    for (const mode of PRELOADED) checkCases(mode, ERRNO_ON_FIRST_ALLOCATION);
  },
);
