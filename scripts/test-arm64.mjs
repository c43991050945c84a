// The arm64 pass of `npm test` (`npm run test:arm64`): the preload library, the addon and the
// tools built for aarch64 (scripts/cross.mjs: Debian's cross compiler against Debian's arm64
// libmimalloc, into build/linux-arm64), and part of the suite run against them under qemu's
// user-mode emulator: the whole native suite (its C and C++ fixtures built by the cross compiler
// and started through qemu-aarch64 -L <sysroot>, its Node cases on the arm64 Node), the fork and
// signal gates, and the Node tests on the official arm64 Node 24 (JS attribution, pool threads,
// signals under run).
// The test files themselves run on this machine's Node; the programs they start run on arm64.
//   node scripts/test-arm64.mjs [node --test options]
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { ARM64_NODE_VERSION, arm64Build, buildArm64, ensureArm64Node, ensureCrossToolchain } from './cross.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

// What runs under qemu (several times slower than the machine): the whole native suite (its
// fixtures built for aarch64 and run through the emulator, its controls on the arm64 glibc and
// Debian's arm64 libmimalloc, its Node cases on the arm64 Node; what qemu-user cannot do is
// skipped by the tests themselves, each with its reason: `onCross` in test/mimalloc.ts), the
// fork and signal gates, and the Node attribution.
const NATIVE = readdirSync(join(root, 'dist', 'test', 'native')).filter((f) => f.endsWith('.test.js')).sort().map((f) => `native/${f}`);
const FILES = (process.env.MIMALLOC_PPROF_TEST_ARM64_FILES?.split(',') ?? [
  ...NATIVE,
  'reliability/fork.test.js',
  'reliability/hostile-signals.test.js',
  'arm64/native.arm64.js',
  'arm64/node.arm64.js',
]);

// Once more on the debug build (internal assertions on: every walk taken from the memo checked
// against a fresh one), with the Node tests (JIT frames, pool threads, signals).
const DEBUG_FILES = ['arm64/node.arm64.js'];

const t0 = Date.now();
const t = ensureCrossToolchain();
const node = ensureArm64Node();
buildArm64(t);
const debugLib = buildArm64(t, join(arm64Build, 'debug'), ['DEBUG=1']).library;

function pass(title, list, lib) {
  console.log(`# ---- ${title}: ${list.length} test files ----`);
  const files = list.map((f) => join(root, 'dist', 'test', f));
  for (const f of files) if (!existsSync(f)) throw new Error(`${f} is missing: build the tests first (npx tsc -p tsconfig.json)`);
  return spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...process.argv.slice(2), ...files], {
    stdio: 'inherit',
    env: env(lib),
  }).status ?? 1;
}

const env = (lib) => ({
    ...process.env,
    MIMALLOC_PPROF_LIB: lib,
    MIMALLOC_PPROF_TEST_PREFIX: t.mimallocPrefix,
    MIMALLOC_PPROF_TEST_CC: t.cc,
    MIMALLOC_PPROF_TEST_CXX: t.cxx,
    MIMALLOC_PPROF_TEST_OBJDUMP: t.objdump,
    MIMALLOC_PPROF_TEST_EXEC_WRAPPER: JSON.stringify([t.qemu, '-L', t.sysroot]),
    MIMALLOC_PPROF_TEST_ARM64_NODE: node,
    // the profiles name /lib/aarch64-linux-gnu/libc.so.6 and the like as qemu's guest sees them
    MIMALLOC_PPROF_SYSROOT: t.sysroot,
});

const label = `qemu-aarch64, Node ${ARM64_NODE_VERSION}`;
let status = pass(`arm64 (${label})`, FILES, join(arm64Build, 'libmimalloc-pprof.so'));
if (process.env.MIMALLOC_PPROF_TEST_ARM64_FILES === undefined) status = pass(`arm64 debug build (${label})`, DEBUG_FILES, debugLib) || status;
console.log(`# arm64 pass: ${((Date.now() - t0) / 1000).toFixed(0)} s`);
process.exit(status);
