#!/usr/bin/env node
// What profiling costs a Node process, against what jemalloc's profiler costs it, measured in
// the same paired run (see bench/README.md).
//
//   node bench/node-profiler.mjs [--blocks 40] [--pairs 20] [--design plain|pinned] [--workload mix,http-workers] [--unwind-cache on|off] [--json] [--write] [--quick]
//
// Figures:
//  - for each workload (node-mix.cjs 40: Buffers, zlib, JSON and crypto on the main thread;
//    http-workers.cjs 3000: an HTTP service under autocannon whose answers two worker_threads
//    build), wall time, CPU time and peak RSS under six arms run by
//    `mimalloc-pprof compare` (each block runs every arm once, in a fresh random order): the
//    library stopped, profiling at the default 512 KiB interval, and profiling at a 1 TiB one
//    (its entry points watch, no sample is taken); jemalloc, and jemalloc with its profiler at
//    the same mean interval (prof:true,lg_prof_sample:19, no dump) and at 2^40 bytes. Per
//    block, ours = profiling / stopped, jemalloc's = with / without its profiler, and ours over
//    jemalloc's; each the median over blocks with a 95 % bootstrap interval (10 000 resamples
//    of whole blocks). The 1 TiB arms split each cost into its entry points' part and its
//    samples' part;
//  - the design: `plain` (the default) runs node as users run it: V8's platform threads on
//    (concurrent marking, sweeping, compilation), every CPU; `pinned` runs every arm on the
//    last allowed CPU (compare under taskset) with `node --single-threaded`, which halves the
//    spread of the per-block ratios on a shared 2-vCPU machine but moves V8's threads' work
//    onto the main thread, so a cost that lives there is not seen: an option for finding small
//    effects;
//  - where the extra peak RSS goes: --pairs interleaved pairs of bench/fixtures/node-mix-status.cjs
//    (the same workload, reading /proc/self/status at exit), stopped and profiling: the paired
//    differences of peak RSS (VmHWM), of its file-backed part and of the rest, against the
//    profile's own estimate of the live heap at its peak (MIMALLOC_PROF_DUMP_PEAK_AT_EXIT);
//    and, free of the noise that V8's heap puts in those, what the profiler adds by its own
//    count: its anonymous memory resident at exit (`# profiler_resident`, native/src/resident.c),
//    what its sampled blocks held beyond their requests at the peak (`# sampled_rounding_bytes`
//    of the peak profile, native/src/sampler.c), and the file-backed difference.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { median, writeBlock } from './readme-block.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: {
    blocks: { type: 'string', default: '40' },
    pairs: { type: 'string', default: '20' },
    quick: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    write: { type: 'boolean', default: false },
    design: { type: 'string' },
    workload: { type: 'string', default: 'mix,http-workers' },
    'unwind-cache': { type: 'string', default: 'on' },
  },
});
const blocks = values.quick ? 2 : Number(values.blocks);
const pairs = values.quick ? 2 : Number(values.pairs);
const rounds = values.quick ? '2' : '40';
if (!(blocks >= 2) || !(pairs >= 2)) die('--blocks and --pairs must be at least 2');
if (values.write && values.quick) die('--write records full runs only; drop --quick');
/** The CPUs this process may run on (cgroups, an outer taskset), from /proc/self/status. */
function allowedCpus() {
  const list = /^Cpus_allowed_list:\s*(\S+)/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '';
  return list.split(',').flatMap((range) => {
    const [lo, hi = lo] = range.split('-').map(Number);
    return Number.isInteger(lo) && Number.isInteger(hi) ? Array.from({ length: hi - lo + 1 }, (_, i) => lo + i) : [];
  });
}
const allowed = allowedCpus();
const pinCpu = String(allowed.at(-1) ?? 0);
const taskset = spawnSync('taskset', ['-c', pinCpu, 'true']).status === 0;
const design = values.design ?? 'plain';
if (design !== 'pinned' && design !== 'plain') die(`--design is pinned or plain, not ${design}`);
if (design === 'pinned' && !taskset) die('--design pinned needs taskset (util-linux)');
// on: the profiling arms keep their unwind rules between runs in a folder of this benchmark's, as
// `run` does in the cache folder (MIMALLOC_PROF_UNWIND_CACHE); compare's warm-up block fills it
const unwindCache = values['unwind-cache'];
if (unwindCache !== 'on' && unwindCache !== 'off') die(`--unwind-cache is on or off, not ${unwindCache}`);
const lib = join(root, 'build', 'libmimalloc-pprof.so');
const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const work = mkdtempSync(join(tmpdir(), 'mpp-bench-node-profiler-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

function die(message) {
  console.error(`bench/node-profiler: ${message}`);
  process.exit(1);
}
const note = (m) => values.json || console.error(m);

let state = 20261203;
const random = () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32);
/** The median of xs with a 95 % bootstrap interval. */
function estimate(xs) {
  const m = [];
  for (let t = 0; t < 10_000; t++) m.push(median(xs.map(() => xs[Math.floor(random() * xs.length)])));
  m.sort((a, b) => a - b);
  return { median: median(xs), lo: m[249], hi: m[9749] };
}
const ratio = (e) => ({ median: Math.exp(e.median), lo: Math.exp(e.lo), hi: Math.exp(e.hi) });

// ---- the six arms, paired --------------------------------------------------------------------
const WORKLOADS = {
  mix: { file: 'node-mix.cjs', arg: rounds, title: 'Buffers, zlib, JSON, crypto on the main thread' },
  'http-workers': { file: 'http-workers.cjs', arg: values.quick ? '200' : '3000', title: 'an HTTP service under autocannon, answers built by two worker_threads' },
};
const chosen = values.workload.split(',').filter(Boolean);
for (const w of chosen) if (!WORKLOADS[w]) die(`--workload takes ${Object.keys(WORKLOADS).join(', ')}, not ${w}`);
// Pinned, compare itself runs under taskset and its runs inherit the CPU: a taskset in the
// command would start under each arm's preload too.
const pinned = design === 'pinned';
const pin = pinned ? ['taskset', '-c', pinCpu] : [];

function measure(id) {
  const w = WORKLOADS[id];
  const command = [process.execPath, ...(pinned ? ['--single-threaded'] : []), join(root, 'bench', 'fixtures', w.file), w.arg];
  note(`bench/node-profiler: ${blocks} blocks of 6 arms (${w.file} ${w.arg}, ${design})…`);
  const jsonOut = join(work, `compare-${id}.json`);
  const compareArgv = [...pin, process.execPath, cli, 'compare',
    '--allocators', 'stopped=mimalloc-pprof,profiling=mimalloc-pprof-profiling,idle=mimalloc-pprof-profiling,jemalloc,jeprof=jemalloc,jeidle=jemalloc',
    '--env', 'idle:MIMALLOC_PROF_SAMPLE_INTERVAL=1024g',
    ...(unwindCache === 'on' ? ['profiling', 'idle'].flatMap((arm) => ['--env', `${arm}:MIMALLOC_PROF_UNWIND_CACHE=${join(work, `unwind-${id}`)}`]) : []),
    '--env', 'jeprof:MALLOC_CONF=prof:true,lg_prof_sample:19', '--env', 'jeidle:MALLOC_CONF=prof:true,lg_prof_sample:40',
    '--baseline', 'stopped', '--blocks', String(blocks), '--seed', '20261203', '--counts', 'off', '--quiet', '--json', jsonOut,
    '--', ...command];
  const cmp = spawnSync(compareArgv[0], compareArgv.slice(1), { encoding: 'utf8' });
  if (cmp.status !== 0) die(`compare failed (${cmp.status}): ${cmp.stderr || cmp.stdout}`);
  const runs = JSON.parse(readFileSync(jsonOut, 'utf8')).runs;
  const byBlock = new Map();
  for (const r of runs) if (r.ok && r.block > 0) byBlock.set(r.block, { ...byBlock.get(r.block), [r.arm]: r.m });
  const ARMS = ['stopped', 'profiling', 'idle', 'jemalloc', 'jeprof', 'jeidle'];
  const complete = [...byBlock.values()].filter((b) => ARMS.every((a) => b[a] !== undefined));
  if (complete.length < 2) die('jemalloc is not installed, or too few blocks completed (npm test\'s set-up installs it)');
  const logRatio = (key, a, b) => complete.map((x) => Math.log(x[a][key] / x[b][key]));
  const costs = {};
  const split = {};
  for (const [key, name] of [['wallS', 'wall'], ['cpuS', 'cpu'], ['maxrssBytes', 'peakRss']]) {
    const ours = logRatio(key, 'profiling', 'stopped');
    const theirs = logRatio(key, 'jeprof', 'jemalloc');
    costs[name] = {
      ours: ratio(estimate(ours)),
      jemallocProfiler: ratio(estimate(theirs)),
      oursOverJemalloc: ratio(estimate(ours.map((x, i) => x - theirs[i]))),
    };
    if (name === 'peakRss') continue;
    split[name] = {
      oursEntryPoints: ratio(estimate(logRatio(key, 'idle', 'stopped'))),
      oursSamples: ratio(estimate(logRatio(key, 'profiling', 'idle'))),
      jemallocEntryPoints: ratio(estimate(logRatio(key, 'jeidle', 'jemalloc'))),
      jemallocSamples: ratio(estimate(logRatio(key, 'jeprof', 'jeidle'))),
    };
  }
  return { id, file: w.file, arg: w.arg, title: w.title, blocks: complete.length, unwindCache, costs, split };
}
const measured = chosen.map(measure);

// ---- where the peak RSS goes ------------------------------------------------------------------
note(`bench/node-profiler: ${pairs} pairs reading /proc/self/status…`);
function statusRun(profiling, peakFile) {
  const env = { ...process.env, LD_PRELOAD: lib };
  for (const k of Object.keys(env)) if (k.startsWith('MIMALLOC_')) delete env[k];
  // the dumps come after the status is read; the peak profile is written only beside the exit one
  if (profiling) Object.assign(env, { MIMALLOC_PROF: '1', MIMALLOC_PROF_DUMP_PEAK_AT_EXIT: peakFile, MIMALLOC_PROF_DUMP_AT_EXIT: `${peakFile}.exit` });
  const r = spawnSync(process.execPath, [join(root, 'bench', 'fixtures', 'node-mix-status.cjs'), rounds], { encoding: 'utf8', env });
  if (r.status !== 0) die(`node-mix-status.cjs failed (${r.status ?? r.signal}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}
const diffs = { hwm: [], file: [], rest: [] };
const liveAtPeak = [];
const selfKiB = [];
const roundingKiB = [];
for (let i = 0; i < pairs; i++) {
  const peakFile = join(work, `peak-${i}.heap`);
  const first = i % 2 === 0;
  const a = statusRun(first, peakFile);
  const b = statusRun(!first, peakFile);
  const [on, off] = first ? [a, b] : [b, a];
  diffs.hwm.push(on.hwm - off.hwm);
  diffs.file.push(on.file - off.file);
  diffs.rest.push(on.hwm - on.file - (off.hwm - off.file));
  // "heap profile: N: BYTES [...] @ heap_v2/R": the estimate of bytes in use at the peak
  const peak = readFileSync(peakFile, 'utf8');
  const head = /^heap profile:\s*\d+:\s*(\d+)/.exec(peak);
  if (head) liveAtPeak.push(Number(head[1]) / 1024);
  const own = /^# profiler_resident: (\d+)/m.exec(peak);
  const rounding = /^# sampled_rounding_bytes: (\d+)/m.exec(peak);
  if (own && rounding) {
    selfKiB.push(Number(own[1]) / 1024);
    roundingKiB.push(Number(rounding[1]) / 1024);
  }
}
if (selfKiB.length !== pairs) die('the peak profiles carry no profiler_resident line (a library from before it?)');
const rss = {
  pairs,
  peakKiB: estimate(diffs.hwm),
  fileKiB: estimate(diffs.file),
  restKiB: estimate(diffs.rest),
  liveHeapAtPeakKiB: { median: median(liveAtPeak), min: Math.min(...liveAtPeak), max: Math.max(...liveAtPeak) },
  profilerResidentKiB: { median: median(selfKiB), min: Math.min(...selfKiB), max: Math.max(...selfKiB) },
  roundingAtPeakKiB: { median: median(roundingKiB), min: Math.min(...roundingKiB), max: Math.max(...roundingKiB) },
};
// by its own count: the profiler's anonymous memory, its rounding at the peak, the file pages it adds
const addedKiB = rss.profilerResidentKiB.median + rss.roundingAtPeakKiB.median + Math.max(0, rss.fileKiB.median);
rss.addedByConstructionKiB = addedKiB;
rss.addedShareOfLiveHeap = addedKiB / rss.liveHeapAtPeakKiB.median;

const result = { date: new Date().toISOString().slice(0, 10), rounds: Number(rounds), design, workloads: measured, rss, cpu: cpus()[0]?.model ?? '?', node: process.version };
if (values.json) {
  console.log(JSON.stringify(result, null, 2));
  process.exit(0);
}

const x = (r) => `${r.median.toFixed(3)}× [${r.lo.toFixed(3)}, ${r.hi.toFixed(3)}]`;
const mb = (kib) => `${(kib / 1024).toFixed(2)} MiB`;
const kb = (kib) => `${kib.toFixed(0)} KiB`;
const mbi = (e) => `${e.median >= 0 ? '+' : ''}${mb(e.median)} [${mb(e.lo)}, ${mb(e.hi)}]`;
const live = rss.liveHeapAtPeakKiB;
const lines = [
  `Measured ${result.date} with \`node bench/node-profiler.mjs${blocks === 40 ? '' : ` --blocks ${blocks}`}${values.design ? ` --design ${design}` : ''}${values.workload !== 'mix,http-workers' ? ` --workload ${values.workload}` : ''}${unwindCache === 'off' ? ' --unwind-cache off' : ''} --write\` (${design === 'plain' ? 'node as users run it: V8\'s platform threads on, every CPU' : `\`node --single-threaded\`, every run on CPU ${pinCpu}`}; ${unwindCache === 'on' ? 'the profiling arms keep their unwind rules between runs, as `run` does' : 'every run\'s unwind rules found anew'}; ${pairs} status pairs); ${result.cpu.replace(/\s+/g, ' ').trim()}, ${cpus().length} cores, Node ${result.node}. Each cell: the median over blocks of the per-block ratio, with its 95 % bootstrap interval.`,
];
for (const m of measured) {
  const { costs, split } = m;
  lines.push(
    '',
    `**${m.file} ${m.arg}** (${m.title}; ${m.blocks} paired blocks):`,
    '',
    '| | ours (profiling / stopped) | jemalloc\'s profiler (with / without) | ours over jemalloc\'s |',
    '|---|---:|---:|---:|',
    `| wall time | ${x(costs.wall.ours)} | ${x(costs.wall.jemallocProfiler)} | ${x(costs.wall.oursOverJemalloc)} |`,
    `| CPU time | ${x(costs.cpu.ours)} | ${x(costs.cpu.jemallocProfiler)} | ${x(costs.cpu.oursOverJemalloc)} |`,
    `| peak RSS | ${x(costs.peakRss.ours)} | ${x(costs.peakRss.jemallocProfiler)} | ${x(costs.peakRss.oursOverJemalloc)} |`,
    '',
    'Each profiler\'s cost in two parts, from the arms that profile at a 1 TiB mean interval (2^40 bytes for jemalloc), so that the entry points watch and no sample is taken:',
    '',
    '| | ours: entry points (1 TiB / stopped) | ours: samples (512 KiB / 1 TiB) | jemalloc\'s: entry points | jemalloc\'s: samples |',
    '|---|---:|---:|---:|---:|',
    `| wall time | ${x(split.wall.oursEntryPoints)} | ${x(split.wall.oursSamples)} | ${x(split.wall.jemallocEntryPoints)} | ${x(split.wall.jemallocSamples)} |`,
    `| CPU time | ${x(split.cpu.oursEntryPoints)} | ${x(split.cpu.oursSamples)} | ${x(split.cpu.jemallocEntryPoints)} | ${x(split.cpu.jemallocSamples)} |`,
  );
}
lines.push(
  '',
  `Peak RSS added by profiling node-mix.cjs, from ${pairs} interleaved pairs (median of the pairs' differences, 95 % bootstrap interval): **${mbi(rss.peakKiB)}** in all; file-backed pages ${mbi(rss.fileKiB)}; the rest ${mbi(rss.restKiB)}. The profile's estimate of the live heap at its peak: ${mb(live.median)} (${mb(live.min)}–${mb(live.max)}), so 2 % of it is ${mb(live.median * 0.02)}.`,
  '',
  `By the profiler's own count, free of V8's noise: its anonymous memory resident at exit (tables, unwind cache, record of mappings; \`# profiler_resident\`) ${kb(rss.profilerResidentKiB.median)} (${kb(rss.profilerResidentKiB.min)}–${kb(rss.profilerResidentKiB.max)}), what its sampled blocks held beyond their requests at the peak (\`# sampled_rounding_bytes\` of the peak profile) ${kb(rss.roundingAtPeakKiB.median)} (${kb(rss.roundingAtPeakKiB.min)}–${kb(rss.roundingAtPeakKiB.max)}), and the file-backed difference above: **${kb(addedKiB)}, ${(100 * rss.addedShareOfLiveHeap).toFixed(2)} % of the live heap at its peak** (medians).`,
);
console.log(lines.join('\n'));
if (values.write) {
  writeBlock('node-profiler', lines);
  note('bench/README.md updated');
}
