/** The mimalloc the native suites run against. `npm test` runs them twice (scripts/run-tests.mjs):
 * against the system's libmimalloc (Debian 12: 2.0.9), then against Debian 13's 3.0.1 that
 * scripts/mimalloc3.mjs unpacks under build/mimalloc3 and builds the library against in build/mi3.
 * The second pass sets MIMALLOC_PPROF_LIB (the library every preloaded run uses) and
 * MIMALLOC_PPROF_TEST_PREFIX (the prefix that test builds of the library link against). */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
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
/** The arm64 pass: the programs under test are aarch64's, run under qemu-user (execWrapper). */
export const onCross = execWrapper.length > 0;
/** The target's objdump (the arm64 pass's cross binutils), for disassembly checks. */
export const targetObjdump = process.env.MIMALLOC_PPROF_TEST_OBJDUMP || 'objdump';
/** Why the arm64 pass skips a check that needs what qemu-user (Debian 12's 7.2) lacks. */
export const QEMU_NO_ADDRESS_REUSE =
  "qemu-user: its mmap never hands out an address just freed (it searches on from its last mapping), so the cross-thread reuse race that this control needs cannot occur";

/** The C library the programs under test are built for: 'musl' in the musl pass
 * (scripts/test-musl.mjs: musl-gcc's programs, the library with mimalloc linked in statically). */
export const targetLibc: 'glibc' | 'musl' = process.env.MIMALLOC_PPROF_TEST_LIBC === 'musl' ? 'musl' : 'glibc';
export const onMusl = targetLibc === 'musl';
/** Why the musl pass skips a check that needs these (t.skip(...)). */
export const MUSL_NO_NODE = 'musl: no musl build of Node here (the npm registry has none; Alpine\'s is not reachable)';
export const MUSL_NO_CXX = "musl: Debian's musl has no C++ runtime (libstdc++ for musl) to build the C++ fixture with";

/** The static archive the library under test links in (the musl pass), '' for a shared mimalloc. */
const mimallocStatic = process.env.MIMALLOC_PPROF_TEST_MIMALLOC_STATIC ?? '';

/** Extra `make -C native` variables for test builds (test hooks, sanitizers, debug). */
export const makeVars: readonly string[] = [
  ...(prefix === '' ? [] : [`MIMALLOC_PREFIX=${prefix}`]),
  ...(mimallocStatic === '' ? [] : [`MIMALLOC_STATIC=${mimallocStatic}`]),
  ...(process.env.MIMALLOC_PPROF_TEST_CC ? [`CC=${targetCC}`] : []),
];

/** Where test builds go: build/ for the system mimalloc, build/mi3 for the second pass. */
export const testBuildRoot = prefix === '' ? join(packageRoot, 'build') : libDir;

/** `-L`/rpath flags that link a program against the mimalloc under test (with a static one,
 * `-lmimalloc` takes the archive: the program gets mimalloc's own copy). */
export const mimallocLinkFlags: readonly string[] = prefix === '' ? [] : [`-L${join(prefix, 'lib')}`, `-Wl,-rpath,${join(prefix, 'lib')}`];

/** A program that does nothing, for the target: /bin/true, or one built by the target's
 * compiler (a glibc program cannot take the musl library preloaded, nor an x86-64 one the
 * arm64 library). */
export function targetTrue(): string {
  if (!onMusl && !onCross) return '/bin/true';
  const out = join(testBuildRoot, 'test', 'true');
  if (!existsSync(out)) {
    mkdirSync(dirname(out), { recursive: true });
    const r = spawnSync(targetCC, ['-x', 'c', '-', '-o', out], { input: 'int main(void) { return 0; }\n', encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`building ${out} failed: ${r.stderr}`);
  }
  return out;
}

/** For test names and diagnostics: which pass this is. */
export const mimallocLabel = prefix === '' ? 'system mimalloc' : `mimalloc at ${prefix}`;

/** The mimalloc version the library under test runs on, as its verbose line names it. */
export function mimallocVersion(): string {
  const r = spawnSync(execWrapper[0] ?? targetTrue(), [...execWrapper.slice(1), ...(onCross ? [targetTrue()] : [])], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH, LD_PRELOAD: libraryPath(), MIMALLOC_PROF_VERBOSE: '1' },
  });
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

/** The version a mimalloc.h declares (MI_MALLOC_VERSION: 209 is 2.0.9, 30001 is 3.0.1). */
export function headerMimallocVersion(header: string): string {
  const v = Number(/^#define MI_MALLOC_VERSION (\d+)/m.exec(readFileSync(header, 'utf8'))?.[1]);
  return v >= 10000 ? `${Math.floor(v / 10000)}.${Math.floor(v / 100) % 100}.${v % 100}` : `${Math.floor(v / 100)}.${Math.floor(v / 10) % 10}.${v % 10}`;
}

/** The target system's own libmimalloc 2 (preloaded alone, for controls) and its version: this
 * machine's package, or in the arm64 pass Debian's arm64 package under the mimalloc prefix
 * (scripts/cross.mjs). null when there is none. */
export function systemMimalloc(): { path: string; version: string } | null {
  if (onCross) {
    const path = join(prefix, 'lib', 'libmimalloc.so.2');
    const header = join(prefix, 'include', 'mimalloc.h');
    return existsSync(path) && existsSync(header) ? { path, version: headerMimallocVersion(header) } : null;
  }
  const path = '/usr/lib/x86_64-linux-gnu/libmimalloc.so.2';
  const q = spawnSync('dpkg-query', ['-W', '-f', '${Version}', 'libmimalloc2.0'], { encoding: 'utf8' });
  return existsSync(path) && q.status === 0 ? { path, version: q.stdout.trim() } : null;
}
