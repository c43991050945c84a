#!/usr/bin/env node
// The wall-clock cost of one sample, and whether sampling threads scale, measured in paired,
// interleaved runs of the same binary with the profiler on and stopped (see bench/README.md).
//
//   node bench/sample-cost.mjs [--pairs 9] [--quick] [--json] [--write]
//
// Figures:
//  - C, ns per sampled malloc+free: bench/sample_cost.c built with and without frame pointers,
//    64 KiB blocks from three nested functions at interval 64 (every block is sampled), on the
//    main thread and on a pthread; against the same loop with the profiler stopped;
//  - Node, ns per sample: bench/fixtures/sample-cost.mjs (64 KiB ArrayBuffers from optimised
//    JavaScript, so every stack crosses JIT frames) at interval 4 KiB; the paired extra time of
//    the loop over the stopped run, divided by the samples the profiler took during it;
//  - threads sampling at 4 KiB: pairs per second with 2 threads over 1 thread, with the profiler
//    on and (for reference) stopped.
// Each figure is the median over --pairs pairs; each pair runs both arms in alternating order.
// MIMALLOC_PPROF_LIB names another preload library (default build/libmimalloc-pprof.so).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { median, readme, writeBlock } from './readme-block.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: {
    pairs: { type: 'string', default: '9' },
    quick: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    write: { type: 'boolean', default: false },
  },
});
const pairs = values.quick ? 2 : Number(values.pairs);
if (!(pairs >= 1)) die('--pairs must be a positive number');
if (values.write && values.quick) die('--write records full runs only; drop --quick');
const lib = process.env.MIMALLOC_PPROF_LIB ?? join(root, 'build', 'libmimalloc-pprof.so');
if (!existsSync(lib)) die(`${lib} is missing: run npm install first`);
const C_PAIRS = values.quick ? 20_000 : 200_000;
const NODE_ALLOCS = values.quick ? 10_000 : 100_000;
const SCALE_PAIRS = values.quick ? 200_000 : 20_000_000;

function die(message) {
  console.error(`bench/sample-cost: ${message}`);
  process.exit(1);
}

const note = (m) => values.json || console.error(m);

function build(variant, flags) {
  const src = join(root, 'bench', 'sample_cost.c');
  const out = join(root, 'build', 'bench', `sample_cost-${variant}`);
  mkdirSync(dirname(out), { recursive: true });
  if (existsSync(out) && statSync(out).mtimeMs >= statSync(src).mtimeMs) return out;
  const r = spawnSync(process.env.CC || 'cc', ['-O2', ...flags, '-fno-builtin-malloc', '-fno-builtin-free', '-I', join(root, 'native', 'include'), '-o', out, src, '-lpthread', '-ldl'], { encoding: 'utf8' });
  if (r.status !== 0) die(`compiling bench/sample_cost.c failed:\n${r.stderr}`);
  return out;
}

const profiling = (interval) => ({ MIMALLOC_PROF: '1', MIMALLOC_PROF_ACCUM: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: String(interval), MIMALLOC_PROF_SEED: '7' });

function once(cmd, args, env) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, LD_PRELOAD: lib, ...env }, timeout: 300_000 });
  if (r.status !== 0) die(`${cmd} ${args.join(' ')} failed (${r.status ?? r.signal}):\n${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

/** Both arms `pairs` times, in alternating order; returns [[on, off], ...]. */
function paired(cmd, args, onEnv) {
  const out = [];
  for (let i = 0; i < pairs; i++) {
    if (i % 2 === 0) {
      const on = once(cmd, args, onEnv);
      out.push([on, once(cmd, args, {})]);
    } else {
      const off = once(cmd, args, {});
      out.push([once(cmd, args, onEnv), off]);
    }
  }
  return out;
}

const results = { c: [], node: null, nodeDeep: null, scale: null };

for (const [variant, flags, label] of [
  ['fp', ['-fno-omit-frame-pointer'], 'frame pointers'],
  ['nofp', ['-fomit-frame-pointer'], 'no frame pointers'],
]) {
  const bin = build(variant, flags);
  for (const thread of ['main', 'worker']) {
    note(`bench/sample-cost: C, ${label}, ${thread} thread (${pairs} pairs)`);
    const runs = paired(bin, ['cost', thread, String(C_PAIRS), '65536'], profiling(64));
    for (const [on] of runs) if (on.samples < C_PAIRS) die(`only ${on.samples} of ${C_PAIRS} pairs were sampled`);
    results.c.push({
      code: label,
      thread,
      sampledNs: median(runs.map(([on]) => on.ns_per_pair)),
      stoppedNs: median(runs.map(([, off]) => off.ns_per_pair)),
      extraNs: median(runs.map(([on, off]) => on.ns_per_pair - off.ns_per_pair)),
    });
  }
}

// Node at the fixture's own depth (4 JavaScript frames) and 30 JavaScript frames deep.
for (const depth of [0, 30]) {
  note(`bench/sample-cost: Node, JIT frames, ${depth || 'a few'} JavaScript frames (${pairs} pairs)`);
  const fixture = join(root, 'bench', 'fixtures', 'sample-cost.mjs');
  const runs = paired(process.execPath, [fixture, String(NODE_ALLOCS), String(depth)], profiling(4096));
  results[depth ? 'nodeDeep' : 'node'] = {
    perSampleNs: median(runs.map(([on, off]) => ((on.nsPerAlloc - off.nsPerAlloc) * NODE_ALLOCS) / on.samples)),
    samplesPerAlloc: median(runs.map(([on]) => on.samples / NODE_ALLOCS)),
    sampledNs: median(runs.map(([on]) => on.nsPerAlloc)),
    stoppedNs: median(runs.map(([, off]) => off.nsPerAlloc)),
  };
}

{
  note(`bench/sample-cost: 1 and 2 threads at 4 KiB (${pairs} pairs)`);
  const bin = build('fp', ['-fno-omit-frame-pointer']);
  const rate = (r) => r.pairs / r.seconds;
  const one = [], two = [], oneOff = [], twoOff = [];
  for (let i = 0; i < pairs; i++) {
    for (const [threads, on, off] of i % 2 ? [[2, two, twoOff], [1, one, oneOff]] : [[1, one, oneOff], [2, two, twoOff]]) {
      on.push(rate(once(bin, ['scale', String(threads), String(SCALE_PAIRS)], profiling(4096))));
      off.push(rate(once(bin, ['scale', String(threads), String(SCALE_PAIRS)], {})));
    }
  }
  results.scale = {
    profiling: median(two.map((t, i) => t / one[i])),
    stopped: median(twoOff.map((t, i) => t / oneOff[i])),
    onePairsPerSecond: median(one),
  };
}

const fmt = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
const lines = [];
lines.push('| code | thread | ns per sampled malloc+free | same loop, profiler stopped | extra per sample |');
lines.push('|---|---|---:|---:|---:|');
for (const r of results.c) lines.push(`| C, ${r.code} | ${r.thread} | ${fmt(r.sampledNs)} | ${fmt(r.stoppedNs)} | ${fmt(r.extraNs)} |`);
lines.push('');
lines.push(`Node (JavaScript through JIT frames into node's ArrayBuffer allocator, interval 4 KiB, ${results.node.samplesPerAlloc.toFixed(2)} samples per 64 KiB allocation): **${fmt(results.node.perSampleNs)} ns per sample** (the loop's extra time over the stopped run, per sample taken; ${fmt(results.node.sampledNs)} ns per allocation profiling, ${fmt(results.node.stoppedNs)} ns stopped).`);
lines.push('');
lines.push(`The same, each allocation 30 JavaScript frames deep: **${fmt(results.nodeDeep.perSampleNs)} ns per sample** (${fmt(results.nodeDeep.sampledNs)} ns per allocation profiling, ${fmt(results.nodeDeep.stoppedNs)} ns stopped).`);
lines.push('');
lines.push(`Threads sampling at 4 KiB (16 B–4 KiB blocks): 2 threads do **${results.scale.profiling.toFixed(2)}×** the pairs per second of 1 thread (profiler stopped: ${results.scale.stopped.toFixed(2)}×; ${(results.scale.onePairsPerSecond / 1e6).toFixed(1)} M pairs/s on one thread).`);

if (values.json) console.log(JSON.stringify(results, null, 2));
else console.log(lines.join('\n'));

if (values.write) {
  const date = new Date().toISOString().slice(0, 10);
  writeBlock('sample-cost', [
    `Measured ${date} with \`node bench/sample-cost.mjs --write\` (${pairs} pairs per figure, medians); ${cpus()[0]?.model ?? 'unknown CPU'}, ${cpus().length} cores, Node ${process.version}; preload library \`${lib.startsWith(root) ? lib.slice(root.length + 1) : lib}\`.`,
    '',
    ...lines,
  ]);
  note(`bench/sample-cost: figures written to ${readme}`);
}
