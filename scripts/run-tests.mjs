// Runs every compiled test file (dist/test/**/*.test.js) under node's test runner, one file
// at a time (the native tests measure processes and should not compete for the 2 cores).
// Then the suites that exercise the preload library (native, node, reliability, run) run
// again against the second mimalloc major (Debian 13's 3.0.1, built by scripts/mimalloc3.mjs
// into build/mi3; see test/mimalloc.ts), and the reliability gates run once more on the debug
// build (build/debug). Every pass must pass.
//   node scripts/run-tests.mjs [--pass system|mimalloc3|debug] [node --test options]
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { mi3Dir, mi3Library } from './mimalloc3.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SECOND_PASS = /^(native|node|reliability|run)\//;
// The gates once more on the debug build (native/Makefile DEBUG=1: internal assertions on).
const DEBUG_PASS = /^(reliability\/(churn|fork|dumps|node|hostile(-\w+)?)|native\/(regressions|stress|api|resident|direct))\.test\.js$/;

const args = process.argv.slice(2);
let only = '';
const i = args.indexOf('--pass');
if (i >= 0) only = args.splice(i, 2)[1] ?? '';

const all = readdirSync(join(root, 'dist', 'test'), { recursive: true })
  .map(String)
  .filter((f) => f.endsWith('.test.js'))
  .sort();

function pass(name, files, env) {
  console.log(`# ---- ${name}: ${files.length} test files ----`);
  const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...args, ...files.map((f) => join(root, 'dist', 'test', f))], {
    stdio: 'inherit',
    env: { ...process.env, ...env },
  });
  return r.status ?? 1;
}

let status = 0;
if (only === '' || only === 'system') status = pass('system mimalloc', all, {});
if (only === '' || only === 'mimalloc3') {
  const second = pass('mimalloc 3 (Debian 13)', all.filter((f) => SECOND_PASS.test(f)), {
    MIMALLOC_PPROF_LIB: mi3Library,
    MIMALLOC_PPROF_TEST_PREFIX: join(mi3Dir, 'prefix'),
  });
  status = status || second;
}
if (only === '' || only === 'debug') {
  const third = pass('debug build (assertions on)', all.filter((f) => DEBUG_PASS.test(f)), {
    MIMALLOC_PPROF_LIB: join(root, 'build', 'debug', 'libmimalloc-pprof.so'),
  });
  status = status || third;
}
process.exit(status);
