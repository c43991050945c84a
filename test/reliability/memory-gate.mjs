#!/usr/bin/env node
// The memory gate (docs/reliability.md, gate 5): peak RSS and profiler memory of the
// reference workload (test/reliability/fixtures/workload.c) under the preload, against the
// committed baseline test/reliability/memory-baseline.json.
//
//   node test/reliability/memory-gate.mjs [--runs N] [--lib DIR] [--leak BYTES]
//       checks: the minimum of N runs (default 4) of each metric must not exceed the baseline
//       by more than its tolerance; exit 0 (pass), 1 (fail), 2 (usage or error)
//   node test/reliability/memory-gate.mjs --update [--runs N]
//       records a new baseline from N runs (default 8) of the production library; refuses an
//       injected run (--leak, --lib other than build/, any MP_TEST_* variable, a library built
//       with test hooks)
//
// A metric's tolerance is derived from the spread the baseline's own runs showed:
// max(15 %, 1.5 x (max - min) / min). A clean run's minimum stays within the baseline's runs,
// so the limit must clear their whole spread; 1.5 x that leaves room for a noisier moment. The
// 15 % floor covers what one session's runs may not show: peak RSS on the 2-core
// CI machine has two modes about 11 % apart (the last phase lands on fresh pages or not), and
// drifted by up to 7 % over hours. Profiler memory is deterministic, its spread 0. Every run
// prints each metric's minimum, its own spread, the baseline, the tolerance and the limit.
// --leak BYTES makes the workload leak that much (the RSS check's control); MP_TEST_LEAK=1
// with the test-hooks library (--lib build/test-hooks) makes the profiler release nothing
// (the profiler-memory check's control).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
// One baseline per mimalloc under test: the system's, or the second pass's (test/mimalloc.ts).
const secondMimalloc = (process.env.MIMALLOC_PPROF_TEST_PREFIX ?? '') !== '';
const baselineFile = join(root, 'test', 'reliability', secondMimalloc ? 'memory-baseline-mimalloc3.json' : 'memory-baseline.json');
const source = join(root, 'test', 'reliability', 'fixtures', 'workload.c');
const productionDir = process.env.MIMALLOC_PPROF_LIB ? dirname(resolve(process.env.MIMALLOC_PPROF_LIB)) : join(root, 'build');
const METRICS = ['peak_rss', 'profiler_peak'];
const FLOOR = 0.15;
const FACTOR = 1.5;

const say = (line) => console.log(`memory-gate: ${line}`);
function die(message, code = 2) {
  console.error(`memory-gate: ${message}`);
  process.exit(code);
}

// ---- arguments ----
const args = process.argv.slice(2);
const opts = { update: false, runs: 0, lib: productionDir, leak: 0 };
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const value = () => (i + 1 < args.length ? args[++i] : die(`${a} needs a value`));
  if (a === '--update') opts.update = true;
  else if (a === '--runs') opts.runs = Number(value());
  else if (a === '--lib') opts.lib = resolve(value());
  else if (a === '--leak') opts.leak = Number(value());
  else die(`unknown argument ${a} (usage: memory-gate.mjs [--update] [--runs N] [--lib DIR] [--leak BYTES])`);
}
if (opts.runs === 0) opts.runs = opts.update ? 8 : 4;
if (!Number.isInteger(opts.runs) || opts.runs < 2) die('--runs must be an integer >= 2');
if (!Number.isInteger(opts.leak) || opts.leak < 0) die('--leak must be a byte count');
const library = join(opts.lib, 'libmimalloc-pprof.so');
if (!existsSync(library)) die(`no library at ${library} (run npm install, or make -C native test-hooks)`);

// ---- an injected run never becomes a baseline ----
const injected = [];
if (opts.leak > 0) injected.push(`--leak ${opts.leak}`);
if (opts.lib !== productionDir) injected.push(`--lib ${opts.lib}`);
for (const k of Object.keys(process.env).filter((k) => k.startsWith('MP_TEST_'))) injected.push(`${k}=${process.env[k]}`);
if (readFileSync(library).includes(Buffer.from('MP_TEST_'))) injected.push(`${library} is a test-hooks build`);
if (opts.update && injected.length > 0) die(`refusing to write a baseline from an injected run (${injected.join('; ')})`);

// ---- the workload, built against the library it runs under ----
const outDir = join(productionDir, 'test', 'reliability');
const bin = join(outDir, opts.lib === productionDir ? 'workload' : `workload-${opts.lib.split('/').pop()}`);
mkdirSync(outDir, { recursive: true });
if (!existsSync(bin) || statSync(bin).mtimeMs < Math.max(statSync(source).mtimeMs, statSync(library).mtimeMs)) {
  const cc = spawnSync('cc', ['-std=gnu11', '-g', '-O1', '-fno-omit-frame-pointer', '-Wall', '-Werror', '-I', join(root, 'native', 'include'), source,
    '-o', bin, `-L${opts.lib}`, `-Wl,-rpath,${opts.lib}`, '-lmimalloc-pprof', '-lpthread', '-ldl'], { encoding: 'utf8' });
  if (cc.status !== 0) die(`building the workload failed:\n${cc.stderr}`);
}

function runOnce(i) {
  const dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'mpp-memgate-'));
  try {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_')));
    const r = spawnSync(bin, [dir, String(opts.leak)], { encoding: 'utf8', env: { ...env, LD_PRELOAD: library }, timeout: 120_000 });
    if (r.status !== 0) die(`run ${i}: the workload ended with ${r.signal ?? `exit ${r.status}`}: ${r.stderr.trim()}`);
    const kv = Object.fromEntries(r.stdout.split('\n').filter((l) => l.includes('=')).map((l) => l.split('=')));
    const values = Object.fromEntries(METRICS.map((m) => [m, Number(kv[m])]));
    if (METRICS.some((m) => !Number.isFinite(values[m]))) die(`run ${i}: unexpected output:\n${r.stdout}`);
    return values;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const mib = (b) => `${(b / 1048576).toFixed(2)} MiB`;
const pct = (x) => `${(100 * x).toFixed(1)} %`;
const spreadOf = (xs) => (Math.max(...xs) - Math.min(...xs)) / Math.min(...xs);

say(`${opts.runs} runs of ${bin.replace(`${root}/`, '')} under ${library.replace(`${root}/`, '')}${injected.length ? ` (injected: ${injected.join('; ')})` : ''}`);
const runs = [];
for (let i = 1; i <= opts.runs; i++) {
  const v = runOnce(i);
  runs.push(v);
  say(`run ${i}: ${METRICS.map((m) => `${m} ${mib(v[m])}`).join(', ')}`);
}

if (opts.update) {
  const metrics = {};
  for (const m of METRICS) {
    const xs = runs.map((r) => r[m]);
    metrics[m] = { min: Math.min(...xs), max: Math.max(...xs), spread: Number(spreadOf(xs).toFixed(4)), runs: xs };
  }
  const mi = secondMimalloc
    ? (readdirSync(join(root, 'build', 'mimalloc3', 'debs')).find((f) => f.startsWith('libmimalloc3_'))?.split('_')[1] ?? '3.x')
    : spawnSync('sh', ['-c', "dpkg-query -W -f='${Version}' libmimalloc2.0 2>/dev/null || true"], { encoding: 'utf8' }).stdout.trim();
  const baseline = {
    comment: 'written by node test/reliability/memory-gate.mjs --update; see docs/reliability.md',
    workload: 'test/reliability/fixtures/workload.c',
    recorded: new Date().toISOString().slice(0, 10),
    machine: { kernel: spawnSync('uname', ['-r'], { encoding: 'utf8' }).stdout.trim(), cpus: (await import('node:os')).cpus().length, mimalloc: mi || 'unknown' },
    tolerance: { floor: FLOOR, factor: FACTOR },
    metrics,
  };
  writeFileSync(baselineFile, `${JSON.stringify(baseline, null, 2)}\n`);
  for (const m of METRICS) say(`${m}: baseline ${mib(metrics[m].min)} (spread ${pct(metrics[m].spread)} over ${opts.runs} runs)`);
  say(`wrote ${baselineFile.replace(`${root}/`, '')}`);
  process.exit(0);
}

if (!existsSync(baselineFile)) die(`no baseline (${baselineFile}): run with --update first`);
const baseline = JSON.parse(readFileSync(baselineFile, 'utf8'));
let failed = false;
for (const m of METRICS) {
  const b = baseline.metrics[m];
  const xs = runs.map((r) => r[m]);
  const min = Math.min(...xs);
  const tolerance = Math.max(baseline.tolerance.floor, baseline.tolerance.factor * b.spread);
  const limit = b.min * (1 + tolerance);
  const ok = min <= limit;
  failed ||= !ok;
  say(
    `${m} min ${mib(min)} of ${xs.length} runs (spread ${pct(spreadOf(xs))}); baseline ${mib(b.min)} (spread ${pct(b.spread)} over ${b.runs.length} runs); ` +
      `tolerance ${pct(tolerance)} -> limit ${mib(limit)}; ${min >= b.min ? '+' : ''}${pct((min - b.min) / b.min)}: ${ok ? 'ok' : 'FAIL'}`,
  );
}
say(failed ? 'FAIL' : 'PASS');
process.exit(failed ? 1 : 0);
