/** The mimalloc the native suites run against. `npm test` runs them twice (scripts/run-tests.mjs):
 * against the system's libmimalloc (Debian 12: 2.0.9), then against Debian 13's 3.0.1 that
 * scripts/mimalloc3.mjs unpacks under build/mimalloc3 and builds the library against in build/mi3.
 * The second pass sets MIMALLOC_PPROF_LIB (the library every preloaded run uses) and
 * MIMALLOC_PPROF_TEST_PREFIX (the prefix that test builds of the library link against). */
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';

import { libraryPath, packageRoot } from '../src/preload/library.js';

const prefix = process.env.MIMALLOC_PPROF_TEST_PREFIX ?? '';

/** The directory of the production library under test (build/, or build/mi3). */
export const libDir = dirname(libraryPath());

/** A cross pass (scripts/test-arm64.mjs): the target's C and C++ compilers, and the command
 * (JSON argv, e.g. qemu-aarch64 -L <sysroot>) that every program built for it is started with. */
export const targetCC = process.env.MIMALLOC_PPROF_TEST_CC ?? 'cc';
export const targetCXX = process.env.MIMALLOC_PPROF_TEST_CXX ?? 'g++';
export const execWrapper: readonly string[] = JSON.parse(process.env.MIMALLOC_PPROF_TEST_EXEC_WRAPPER || '[]') as string[];

/** Extra `make -C native` variables for test builds (test hooks, sanitizers, debug). */
export const makeVars: readonly string[] = [
  ...(prefix === '' ? [] : [`MIMALLOC_PREFIX=${prefix}`]),
  ...(process.env.MIMALLOC_PPROF_TEST_CC ? [`CC=${targetCC}`] : []),
];

/** Where test builds go: build/ for the system mimalloc, build/mi3 for the second pass. */
export const testBuildRoot = prefix === '' ? join(packageRoot, 'build') : libDir;

/** `-L`/rpath flags that link a program against the mimalloc under test. */
export const mimallocLinkFlags: readonly string[] = prefix === '' ? [] : [`-L${join(prefix, 'lib')}`, `-Wl,-rpath,${join(prefix, 'lib')}`];

/** For test names and diagnostics: which pass this is. */
export const mimallocLabel = prefix === '' ? 'system mimalloc' : `mimalloc at ${prefix}`;

/** The mimalloc version the library under test runs on, as its verbose line names it. */
export function mimallocVersion(): string {
  const r = spawnSync('/bin/true', [], { encoding: 'utf8', env: { PATH: process.env.PATH, LD_PRELOAD: libraryPath(), MIMALLOC_PROF_VERBOSE: '1' } });
  const m = /mimalloc-pprof: mimalloc (\d+\.\d+\.\d+)/.exec(r.stderr ?? '');
  if (!m) throw new Error(`no version line from the library under test: ${r.stderr}`);
  return m[1]!;
}

/** The stress fixture's environment for the mimalloc under test. mimalloc 3.0.1 itself,
 * without this library (LD_PRELOAD of its own libmimalloc.so.3), fails that workload: realloc of
 * blocks from posix_memalign with alignments of 32 or 64 crashes it (SIGSEGV, 3 runs of 3), and
 * alignments of 256 and above in threads that come and go exhaust its memory ("unable to
 * allocate memory", 3 of 3). On 3.0.x the fixture keeps its alignments at 16
 * (docs/reliability.md, "Both mimalloc majors"). */
export function mimallocDefectEnv(): Record<string, string> {
  return mimallocVersion().startsWith('3.0.') ? { STRESS_MAX_ALIGN: '16' } : {};
}

/** The suite's first pass (the system mimalloc's production build): the later passes
 * (scripts/run-tests.mjs) repeat the slowest gates with fewer runs, to keep the suite short. */
export const firstPass = process.env.MIMALLOC_PPROF_LIB === undefined;
