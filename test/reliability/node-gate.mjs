#!/usr/bin/env node
// The Node gate (docs/reliability.md, gate 7): the Node workload of Buffers, JSON, open zlib
// streams, crypto and worker_threads (fixtures/node-stress.mjs) profiled at a 32 KiB interval
// under the preload, run after run. A run passes when Node exits 0 having printed its `ok`
// line, its at-exit profile parses and validates (the package's own parser, the rules
// google/pprof applies), and so does its peak profile, which must hold samples. (The at-exit
// profile may hold none: it is taken by atexit, after Node has torn its heaps down; Node 22 and
// later free nearly everything there, 0-2 samples at 32 KiB, Node 20 about 20.) The gate passes
// when every run passes.
//
//   node test/reliability/node-gate.mjs [--runs N] [--lib DIR] [--interval BYTES] [--stop-at-first]
//       exit 0 (every run passed), 1 (a run failed), 2 (usage or error)
// A run has 30 s (it takes about 1 s); one still running then counts as failed (hung).
//
// The library defaults to MIMALLOC_PPROF_LIB's directory, else build/. MP_TEST_* variables
// pass through to the runs (the control: MP_TEST_SHARED_HEAP=1 with the test-hooks build).
// The first run's MIMALLOC_PROF_VERBOSE line names the mimalloc in use.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const workload = join(root, 'test', 'reliability', 'fixtures', 'node-stress.mjs');
const { parseProfile } = await import(join(root, 'dist', 'src', 'index.js'));

const say = (line) => console.log(`node-gate: ${line}`);
function die(message) {
  console.error(`node-gate: ${message}`);
  process.exit(2);
}

const args = process.argv.slice(2);
const opts = {
  runs: 10,
  lib: process.env.MIMALLOC_PPROF_LIB ? dirname(resolve(process.env.MIMALLOC_PPROF_LIB)) : join(root, 'build'),
  interval: '32k',
  stopAtFirst: false,
};
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const value = () => (i + 1 < args.length ? args[++i] : die(`${a} needs a value`));
  if (a === '--runs') opts.runs = Number(value());
  else if (a === '--lib') opts.lib = resolve(value());
  else if (a === '--interval') opts.interval = value();
  else if (a === '--stop-at-first') opts.stopAtFirst = true;
  else die(`unknown argument ${a} (usage: node-gate.mjs [--runs N] [--lib DIR] [--interval BYTES])`);
}
if (!Number.isInteger(opts.runs) || opts.runs < 1) die('--runs must be a positive integer');
const library = join(opts.lib, 'libmimalloc-pprof.so');
if (!existsSync(library)) die(`no library at ${library}`);

const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS'));
let version = 'unknown';
let crashes = 0;
let invalid = 0;
for (let i = 1; i <= opts.runs; i++) {
  const dir = mkdtempSync(join(tmpdir(), 'mpp-node-gate-'));
  try {
    const r = spawnSync(process.execPath, [workload], {
      encoding: 'utf8',
      timeout: 30_000,
      killSignal: 'SIGKILL',
      env: {
        ...clean,
        LD_PRELOAD: library,
        MIMALLOC_PROF: '1',
        MIMALLOC_PROF_SAMPLE_INTERVAL: opts.interval,
        MIMALLOC_PROF_DUMP_FORMAT: 'proto',
        MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'heap.%p.pb'),
        MIMALLOC_PROF_DUMP_PEAK_AT_EXIT: join(dir, 'peak.%p.pb'),
        ...(i === 1 ? { MIMALLOC_PROF_VERBOSE: '1' } : {}),
      },
    });
    const v = /mimalloc-pprof: mimalloc (\d+\.\d+\.\d+)/.exec(r.stderr ?? '');
    if (v) version = v[1];
    const hung = r.error?.code === 'ETIMEDOUT';
    const ended = hung ? 'hung (killed after 30 s)' : r.signal ? `killed by ${r.signal}` : `status ${r.status}`;
    if (r.error || r.status !== 0 || !/^ok \d+$/m.test(r.stdout ?? '')) {
      crashes++;
      const why = (r.stderr ?? '').split('\n').find((l) => l.trim() !== '' && !l.startsWith('mimalloc-pprof: mimalloc ')) ?? '';
      say(`run ${i}: FAIL ${r.error && !hung ? r.error.message : ended}${why ? `: ${why.slice(0, 200)}` : ''}`);
      if (opts.stopAtFirst) {
        opts.runs = i;
        break;
      }
      continue;
    }
    const files = readdirSync(dir).filter((f) => f.endsWith('.pb')).sort(); // heap.<pid>.pb, peak.<pid>.pb
    let problem = files.length === 2 && files[0].startsWith('heap.') && files[1].startsWith('peak.') ? '' : `profiles: ${files.join(', ') || 'none'}`;
    for (const f of problem === '' ? files : []) {
      try {
        const p = parseProfile(readFileSync(join(dir, f)), f);
        if (f.startsWith('peak.') && p.sample.length === 0) problem = 'no samples in the peak profile';
      } catch (e) {
        problem = `${f}: ${e instanceof Error ? e.message : String(e)}`;
      }
      if (problem !== '') break;
    }
    if (problem !== '') {
      invalid++;
      say(`run ${i}: FAIL invalid profile: ${problem}`);
      if (opts.stopAtFirst) {
        opts.runs = i;
        break;
      }
    } else {
      say(`run ${i}: ok`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
say(`${opts.runs} runs under mimalloc ${version} at interval ${opts.interval}: ${crashes} crashed, ${invalid} invalid profiles`);
say(crashes + invalid === 0 ? 'PASS' : 'FAIL');
process.exit(crashes + invalid === 0 ? 0 : 1);
