// The musl pass of `npm test`: the preload library built against musl with mimalloc linked in
// statically (the linux-x64-musl package's build: scripts/musl.mjs's musl-gcc, Debian's
// mimalloc source), and the native suites run against it. Their C fixtures and test builds
// (test hooks, debug) are built by the same musl-gcc, whose programs start with musl's loader
// from build/musl, so they run here directly; the test files themselves run on this machine's
// Node. What cannot run here is skipped by the tests themselves, each with its reason
// (`onMusl` in test/mimalloc.ts): Node (no musl build of Node is on the registries this
// project uses), C++ (Debian's musl has no C++ runtime), and glibc's own interfaces.
//   node scripts/test-musl.mjs [node --test options]
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { ensureMusl, muslDir } from './musl.mjs';
import { buildTarget } from './prebuild.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const t0 = Date.now();
const musl = ensureMusl();
const built = buildTarget('linux-x64-musl', { cc: musl.cc, cmakeArgs: musl.cmakeArgs, extraMake: musl.extraMake });
// the library under test in a folder of its own: test builds go beside it (test/mimalloc.ts)
const libDir = join(muslDir, 'lib');
mkdirSync(libDir, { recursive: true });
for (const f of built.binaries) copyFileSync(f, join(libDir, f.split('/').pop()));

const files = (process.env.MIMALLOC_PPROF_TEST_MUSL_FILES?.split(',') ?? readdirSync(join(root, 'dist', 'test', 'native')).filter((f) => f.endsWith('.test.js')).map((f) => `native/${f}`))
  .map((f) => join(root, 'dist', 'test', f));
for (const f of files) if (!existsSync(f)) throw new Error(`${f} is missing: build the tests first (npx tsc -p tsconfig.json)`);
console.log(`# ---- musl (${built.mimalloc.version} linked in): ${files.length} test files ----`);
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...process.argv.slice(2), ...files], {
  stdio: 'inherit',
  env: {
    ...process.env,
    MIMALLOC_PPROF_LIB: join(libDir, 'libmimalloc-pprof.so'),
    MIMALLOC_PPROF_TEST_LIBC: 'musl',
    MIMALLOC_PPROF_TEST_PREFIX: built.mimalloc.prefix,
    MIMALLOC_PPROF_TEST_MIMALLOC_STATIC: built.mimalloc.archive,
    MIMALLOC_PPROF_TEST_CC: musl.cc,
  },
});
console.log(`# musl pass: ${((Date.now() - t0) / 1000).toFixed(0)} s`);
process.exit(r.status ?? 1);
