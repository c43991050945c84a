// Runs every compiled test file (dist/test/**/*.test.js) under node's test runner, one file
// at a time (the native tests measure processes and should not compete for the 2 cores).
// Then the suites that exercise the preload library (native, node, reliability, run) run
// again against the second mimalloc major (Debian 13's 3.0.1, built by scripts/mimalloc3.mjs
// into build/mi3; see test/mimalloc.ts), and the reliability gates run once more on the debug
// build (build/debug). Then the Node-facing suites run once per pinned Node of the matrix
// (22, 24, 26: official binaries in build/node, scripts/nodes.mjs): the test runner, the test
// files and every Node they start (the CLI, the programs under test: `process.execPath` and the
// `node` on PATH) are that Node; MIMALLOC_PPROF_TEST_NODE names it (test/package/matrix.test.ts
// checks the pass really ran it). Then aarch64 under qemu (scripts/test-arm64.mjs) and the native
// suites against the library built for musl (scripts/test-musl.mjs). Every pass must pass; each
// prints its duration.
//   node scripts/run-tests.mjs [--pass system|mimalloc3|debug|node22|node24|node26|nodes|arm64|musl] [node --test options]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { mi3Dir, mi3Library } from './mimalloc3.mjs';
import { NODES, nodeBinary, versionOf } from './nodes.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SECOND_PASS = /^(native|node|reliability|run)\//;
// The gates once more on the debug build (native/Makefile DEBUG=1: internal assertions on).
const DEBUG_PASS = /^(reliability\/(churn|fork|dumps|node|hostile(-\w+)?)|native\/(regressions|stress|api|resident|direct|events)|run\/js-heap-inlined)\.test\.js$/;
// Once per Node of the matrix: what depends on the Node version. `run` and its signals, JS
// attribution (CommonJS, ESM, `(top level)`, inlined frames from V8's code log, perf-map
// names, no unnamed frame), the thread pool, the JS heap (the inspector's sampler), the RSS
// breakdown, peak and periodic profiles, the CLI's caches (V8's code cache of its modules from
// Node 22.8), the in-process API, the service endpoints (also under
// `run --serve`) and push, budgets, growth on leaking services, the Node gate.
const NODE_PASS =
  /^(run\/(run|symbol-cache|fidelity|interrupt|serve|summary|budget|js-heap|js-heap-names|js-heap-inlined|pool|rss|every)|node\/(api|dumps|js-heap|peak|preload)|symbolize\/(perfmap|inlined|unnamed|queued-by)|http\/(pprof|hardening)|push\/(push|flush)|cli\/(symbolize|growth-http|growth-express|growth-inlined)|reliability\/node|native\/jitmap|package\/matrix|testing\/budget)\.test\.js$/;

const args = process.argv.slice(2);
let only = '';
const i = args.indexOf('--pass');
if (i >= 0) only = args.splice(i, 2)[1] ?? '';

const all = readdirSync(join(root, 'dist', 'test'), { recursive: true })
  .map(String)
  .filter((f) => f.endsWith('.test.js'))
  .sort();

// The package's cache folder (symbol tables, demangled names, unwind rules: src/cache-folder.ts)
// is the suite's own, new at each run, unless the caller chose one: what a test sees does not
// depend on what earlier runs, or the user's own profiling, left in ~/.cache.
if (process.env.MIMALLOC_PPROF_CACHE_DIR === undefined) {
  const cache = join(root, 'build', 'test-cache');
  rmSync(cache, { recursive: true, force: true });
  mkdirSync(cache, { recursive: true, mode: 0o700 });
  process.env.MIMALLOC_PPROF_CACHE_DIR = cache;
}

// Each pass's counts, also written as TAP into build/test-results/<pass>.tap (unless the
// command line chose its own reporter), and the summary at the end.
const ownReporter = args.some((a) => a.startsWith('--test-reporter'));
const results = [];

/** What V8 leaves behind for the Node processes the tests start by hand with --perf-basic-prof
 * (the API's tests: a program not under `run` keeps its files, README "Node API"): its perf map
 * in /tmp and its `isolate-*-v8.log` in the working directory. Those written since `since` by
 * processes that have ended are removed, so that the suite leaves neither the checkout nor
 * /tmp littered. (`run` removes its own programs' files: src/run/leftovers.ts.) */
function sweepTestV8Files(since) {
  let n = 0;
  const sweep = (dir, pattern) => {
    let names = [];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const f of names) {
      const pid = pattern.exec(f)?.[1];
      if (pid === undefined || existsSync(`/proc/${pid}`)) continue;
      try {
        const st = statSync(join(dir, f));
        if (st.mtimeMs < since || st.uid !== process.getuid?.()) continue;
        rmSync(join(dir, f), { force: true });
        n++;
      } catch {
        // gone meanwhile
      }
    }
  };
  sweep('/tmp', /^perf-(\d+)\.map$/);
  sweep(root, /^isolate-0x[0-9a-f]+-(\d+)-v8\.log$/);
  return n;
}

function pass(name, files, env, node = process.execPath) {
  console.log(`# ---- ${name}: ${files.length} test files ----`);
  const t0 = Date.now();
  const tap = join(root, 'build', 'test-results', `${name.replace(/[^\w.]+/g, '-')}.tap`);
  mkdirSync(dirname(tap), { recursive: true });
  rmSync(tap, { force: true });
  const reporters = ownReporter ? [] : ['--test-reporter=spec', '--test-reporter-destination=stdout', '--test-reporter=tap', `--test-reporter-destination=${tap}`];
  const r = spawnSync(node, ['--test', '--test-concurrency=1', ...reporters, ...args, ...files.map((f) => join(root, 'dist', 'test', f))], {
    stdio: 'inherit',
    env: { ...process.env, ...env },
  });
  const seconds = ((Date.now() - t0) / 1000).toFixed(0);
  const removed = sweepTestV8Files(t0 - 1000);
  if (removed > 0) console.log(`# ${removed} files V8 wrote for the tests' own Node processes removed (perf maps, isolate logs)`);
  const counts = {};
  if (existsSync(tap)) for (const m of readFileSync(tap, 'utf8').matchAll(/^# (tests|pass|fail|cancelled|skipped|todo) (\d+)$/gm)) counts[m[1]] = Number(m[2]);
  const line = `${name}: ${r.status === 0 ? 'passed' : 'FAILED'} in ${seconds} s` + (counts.tests === undefined ? '' : ` (${counts.tests} tests: ${counts.pass} passed, ${counts.fail} failed, ${counts.skipped} skipped, ${counts.cancelled} cancelled)`);
  results.push(line);
  console.log(`# ---- ${line} ----`);
  return r.status ?? 1;
}

const started = Date.now();
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
for (const [major, { version }] of Object.entries(NODES)) {
  if (!(only === '' || only === 'nodes' || only === `node${major}`)) continue;
  const node = nodeBinary(major);
  // the set-up installs them (scripts/setup-test.mjs); a missing or other one fails the pass
  if (!existsSync(node) || versionOf(node) !== version) {
    const line = `Node ${version}: not installed in build/node/${major} (node scripts/nodes.mjs)`;
    results.push(line);
    console.log(`# ---- ${line} ----`);
    status = status || 1;
    continue;
  }
  const r = pass(`Node ${version}`, all.filter((f) => NODE_PASS.test(f)), {
    MIMALLOC_PPROF_TEST_NODE: node,
    PATH: `${dirname(node)}:${process.env.PATH ?? ''}`,
  }, node);
  status = status || r;
}
if (only === '' || only === 'arm64') {
  // aarch64 under qemu (scripts/test-arm64.mjs)
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'test-arm64.mjs'), ...args], { stdio: 'inherit' }).status ?? 1;
  results.push(`arm64 under qemu: ${r === 0 ? 'passed' : 'FAILED'} in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  status = status || r;
}
if (only === '' || only === 'musl') {
  // the native suites against the library built for musl (scripts/test-musl.mjs)
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'test-musl.mjs'), ...args], { stdio: 'inherit' }).status ?? 1;
  results.push(`musl: ${r === 0 ? 'passed' : 'FAILED'} in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  status = status || r;
}
sweepTestV8Files(started - 1000); // the arm64 and musl passes' too
console.log(`# ==== ${status === 0 ? 'all passes passed' : 'FAILED'}:\n${results.map((l) => `#   ${l}`).join('\n')}`);
process.exit(status);
