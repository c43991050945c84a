// Installs what the test suite uses besides npm packages: the real google/pprof
// (`go tool pprof`, Debian golang-go), valgrind for the callgrind benchmark, g++ for the
// C++ fixtures, clang with its sanitizer and libFuzzer runtimes for the reliability gates,
// Debian's chromium for the HTML report's tests in a real browser. As
// root on Debian/Ubuntu they are installed; elsewhere a missing one stops the run with one line
// naming it.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

const needs = [
  // the system's mimalloc (Debian 12: 2.0.9), which the first pass of the native suites and
  // compare's plain-mimalloc arm run against (test/mimalloc.ts); without it `npm install` built
  // the library against a static copy from Debian's source, rebuilt below once it is here
  ['sh:test -e /usr/include/mimalloc.h && ldconfig -p | grep -qF libmimalloc.so.2', 'libmimalloc-dev'],
  ['go', 'golang-go'],
  ['valgrind', 'valgrind'],
  ['g++', 'g++'],
  ['setarch', 'util-linux'],
  // compare's allocators and the profiler benchmarks (lib: a shared library ldconfig knows)
  ['lib:libjemalloc.so.2', 'libjemalloc2'],
  ['lib:libtcmalloc_minimal.so.4', 'libgoogle-perftools4'],
  ['heaptrack', 'heaptrack'],
  // run --peak against heaptrack on a real job (test/run/heaptrack.test.ts)
  ['sqlite3', 'sqlite3'],
  // the reliability gates (docs/reliability.md): clang, and its ASan/UBSan and libFuzzer
  // runtimes (Debian 12: clang 14's, only recommended by clang; sh: a shell test)
  ['clang', 'clang'],
  ['sh:test -e "$(clang -print-file-name=libclang_rt.fuzzer-$(uname -m).a)"', 'libclang-rt-14-dev'],
  // the HTML report's tests: a real browser, driven by playwright-core (no browser download)
  ['chromium', 'chromium'],
];

const has = (cmd) =>
  spawnSync(
    'sh',
    ['-c', cmd.startsWith('lib:') ? `ldconfig -p | grep -qF ${cmd.slice(4)}` : cmd.startsWith('sh:') ? cmd.slice(3) : `command -v ${cmd}`],
    { stdio: 'ignore' },
  ).status === 0;
const missing = needs.filter(([cmd]) => !has(cmd)).map(([, pkg]) => pkg);
if (missing.length > 0) {
  if (process.getuid?.() === 0 && existsSync('/usr/bin/apt-get')) {
    console.error(`mimalloc-pprof tests: installing ${missing.join(' ')} with apt-get`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    execFileSync('apt-get', ['install', '-y', '-qq', ...missing], { stdio: 'inherit', env });
    if (missing.includes('libmimalloc-dev')) {
      execFileSync(process.execPath, [join(root, 'scripts', 'setup.mjs')], { stdio: 'inherit' });
    }
  } else {
    console.error(`mimalloc-pprof tests: missing ${missing.join(', ')}; install them first`);
    process.exit(1);
  }
}

// Linux arm64 (scripts/cross.mjs): Debian's cross compiler, arm64 C library and libmimalloc,
// qemu-user-static and Node 24 for arm64 under build/cross; the arm64 build in build/linux-arm64.
{
  const cross = await import('./cross.mjs');
  cross.buildArm64(cross.ensureCrossToolchain());
  cross.ensureArm64Node();
}

// The second mimalloc major the native suites also run against (scripts/mimalloc3.mjs).
const { ensureMimalloc3 } = await import('./mimalloc3.mjs');
ensureMimalloc3();

// The pinned Node binaries of the matrix (scripts/nodes.mjs, into build/node/<major>).
const { ensureNodes } = await import('./nodes.mjs');
ensureNodes();

// The debug build (internal assertions on) that the gates run on once more, and the test-hooks build.
{
  const r = spawnSync('make', ['-s', '-j2', '-C', join(root, 'native'), `BUILD=${join(root, 'build', 'debug')}`, 'DEBUG=1'], { stdio: 'inherit' });
  if (r.status !== 0) {
    console.error('mimalloc-pprof tests: the debug build failed (see above)');
    process.exit(1);
  }
  // the test-hooks build (MP_TEST_* switches): the gates' controls build it on demand, and
  // bench/node-features.mjs (its smoke test runs first) needs it ready
  const h = spawnSync('make', ['-s', '-j2', '-C', join(root, 'native'), 'test-hooks', `BUILD=${join(root, 'build', 'test-hooks')}`], { stdio: 'inherit' });
  if (h.status !== 0) {
    console.error('mimalloc-pprof tests: the test-hooks build failed (see above)');
    process.exit(1);
  }
}
