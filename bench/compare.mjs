#!/usr/bin/env node
// Allocator and profiler benchmarks, measured with `mimalloc-pprof compare`'s own machinery
// (paired blocks, shuffled per block, bootstrap intervals). See bench/README.md.
//
//   node bench/compare.mjs [--quick] [--json] [--write] [--blocks=N] [--only=ID,…]
//
//   --quick   2 blocks, no warm-up, tiny workloads (the test suite checks that everything runs)
//   --json    print every figure as JSON on stdout (progress stays on stderr)
//   --write   rewrite the block between <!-- compare:begin --> and <!-- compare:end --> of
//             bench/README.md (full runs only)
//   --blocks  blocks per figure (default 15, as compare's)
//   --only    only these figures (ids: c-tiny-hot-1, …, node-mix, http-service, image-resize,
//             profilers)
//
// Figures:
//   C workloads (bench/workloads.c): tiny-hot, general-mix, large-buffers, cross-thread at 1
//     and 2 threads, under glibc, mimalloc, jemalloc, tcmalloc (baseline glibc);
//   Node workloads (bench/fixtures/): node-mix (Buffers, zlib, JSON, crypto), http-service
//     (loopback HTTP under autocannon), image-resize (sharp's prebuilt libvips), same arms;
//   profilers: node-mix under each allocator with and without its heap profiler:
//     mimalloc-pprof stopped and profiling (512 KiB), jemalloc with
//     MALLOC_CONF=prof:true,lg_prof_sample:19, heaptrack (over glibc); each profiler's cost is
//     its effect against the same allocator without it.
// Instructions per malloc/free pair (plain mimalloc, armed-but-stopped, profiling) are
// bench/callgrind.mjs's figures, in their own block of bench/README.md.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, release, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist', 'src', 'compare');
for (const f of ['allocators.js', 'compare.js', 'report.js', 'runner.js']) {
  if (!existsSync(join(dist, f))) die(`${join(dist, f)} is missing: run \`npm run prepare\` (or npm install) first`);
}
const { parseAllocators, resolveAllocators } = await import(join(dist, 'allocators.js'));
const { analyse, runCompare, METRICS } = await import(join(dist, 'compare.js'));
const { formatBytes, formatSeconds, shellLine } = await import(join(dist, 'report.js'));
const { baseEnvironment, helperPath } = await import(join(dist, 'runner.js'));

const README = join(root, 'bench', 'README.md');
const BEGIN = '<!-- compare:begin -->';
const END = '<!-- compare:end -->';
const COMMAND = 'npm run bench:compare';

const args = process.argv.slice(2);
const flag = (n) => args.includes(`--${n}`);
const option = (n) => args.find((a) => a.startsWith(`--${n}=`))?.slice(n.length + 3);
for (const a of args) if (!/^--(quick|json|write|help|blocks=\d+|only=[\w,-]+)$/.test(a)) die(`unknown argument ${a} (see the head of bench/compare.mjs)`);
if (flag('help')) {
  console.log('usage: node bench/compare.mjs [--quick] [--json] [--write] [--blocks=N] [--only=ID,…]');
  process.exit(0);
}
const quick = flag('quick');
const json = flag('json');
const write = flag('write');
if (write && quick) die('--write records full runs only; drop --quick');
if (write && option('only')) die('--write records every figure; drop --only');
const blocks = Number(option('blocks') ?? (quick ? 2 : 15));
if (!(blocks >= 2)) die('--blocks must be at least 2');
const warmup = quick ? 0 : 1;
const only = option('only')?.split(',');
const seed = 20261130;

function die(message) {
  console.error(`bench/compare: ${message}`);
  process.exit(1);
}
const note = (s) => console.error(s);

helperPath(); // throws with the fix when compare's helper is not built

// ---- workloads ---------------------------------------------------------------------------------
function buildWorkloads() {
  const src = join(root, 'bench', 'workloads.c');
  const out = join(root, 'build', 'bench', 'workloads');
  mkdirSync(dirname(out), { recursive: true });
  if (existsSync(out) && statSync(out).mtimeMs >= statSync(src).mtimeMs) return out;
  const r = spawnSync(process.env.CC || 'cc', ['-std=gnu11', '-O2', '-o', out, src, '-lpthread', '-lm'], { encoding: 'utf8' });
  if (r.status !== 0) die(`compiling bench/workloads.c failed:\n${r.stderr}`);
  return out;
}
const workloads = buildWorkloads();
const node = process.execPath;
const fixture = (f) => join(root, 'bench', 'fixtures', f);

// operations per thread (full / quick): about 0.2-0.5 s of CPU each under glibc
const C_OPS = { 'tiny-hot': [3_000_000, 20_000], 'general-mix': [1_000_000, 20_000], 'large-buffers': [300, 10], 'cross-thread': [1_000_000, 20_000] };
const figures = [];
for (const [mode, [full, small]] of Object.entries(C_OPS)) {
  for (const threads of [1, 2]) {
    figures.push({
      id: `c-${mode}-${threads}`,
      group: 'c',
      title: `${mode}, ${threads} thread${threads === 1 ? '' : 's'}${mode === 'cross-thread' ? ` (${threads} producer/consumer pair${threads === 1 ? '' : 's'})` : ''}`,
      command: [workloads, mode, String(threads), String(quick ? small : full), '1'],
      shown: ['bench/workloads', mode, String(threads), String(quick ? small : full), '1'],
    });
  }
}
const nodeFigures = [
  { id: 'node-mix', title: 'Buffers + zlib + JSON + crypto', file: 'node-mix.cjs', arg: quick ? '1' : '15' },
  { id: 'http-service', title: 'HTTP service, loopback, autocannon (8 connections)', file: 'http-service.cjs', arg: quick ? '100' : '1500', needs: 'autocannon' },
  { id: 'image-resize', title: 'image resizing with sharp (libvips, prebuilt)', file: 'image-resize.cjs', arg: quick ? '1' : '2', needs: 'sharp' },
];
for (const f of nodeFigures) {
  figures.push({ id: f.id, group: 'node', title: f.title, command: [node, fixture(f.file), f.arg], shown: ['node', `bench/fixtures/${f.file}`, f.arg], needs: f.needs });
}
const PROFILER_ARG = quick ? '1' : '15';
figures.push({
  id: 'profilers',
  group: 'profilers',
  title: 'heap profilers on node-mix',
  command: [node, fixture('node-mix.cjs'), PROFILER_ARG],
  shown: ['node', 'bench/fixtures/node-mix.cjs', PROFILER_ARG],
});

function hasModule(name) {
  return spawnSync(node, ['-e', `require.resolve(${JSON.stringify(name)})`], { cwd: root, stdio: 'ignore' }).status === 0;
}

// ---- arms ----------------------------------------------------------------------------------------
const env = baseEnvironment();
const work = mkdtempSync(join(tmpdir(), 'mpp-bench-compare-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

function allocatorArms(list) {
  return resolveAllocators(parseAllocators(list));
}

function profilerArms() {
  const { arms, skipped } = allocatorArms('glibc,mimalloc,stopped=mimalloc-pprof,profiling=mimalloc-pprof-profiling,jemalloc,jeprof=jemalloc');
  const jeprof = arms.find((a) => a.label === 'jeprof');
  if (jeprof) jeprof.env.MALLOC_CONF = 'prof:true,lg_prof_sample:19'; // sampling on, no dump: the cost of sampling
  const heaptrack = spawnSync('sh', ['-c', 'command -v heaptrack'], { encoding: 'utf8' }).stdout.trim();
  if (heaptrack) arms.push({ label: 'heaptrack', kind: 'custom', env: {}, mimalloc: false, wrap: [heaptrack, '-o', join(work, 'heaptrack')] });
  else skipped.push({ label: 'heaptrack', kind: 'custom', reason: 'not installed', package: 'heaptrack' });
  return { arms, skipped };
}

// Profiler cost pairs: [arm, against, what]
const PROFILER_PAIRS = [
  ['stopped', 'mimalloc', 'mimalloc-pprof armed, stopped'],
  ['profiling', 'stopped', 'mimalloc-pprof profiling (512 KiB mean interval)'],
  ['profiling', 'mimalloc', 'mimalloc-pprof profiling (512 KiB mean interval)'],
  ['jeprof', 'jemalloc', 'jemalloc prof:true,lg_prof_sample:19 (512 KiB)'],
  ['heaptrack', 'glibc', 'heaptrack (every allocation, over glibc)'],
];

// ---- runs ------------------------------------------------------------------------------------------
const results = [];
const started = Date.now();
for (const fig of figures) {
  if (only && !only.includes(fig.id) && !only.includes(fig.group)) continue;
  if (fig.needs && !hasModule(fig.needs)) {
    note(`bench/compare: ${fig.id}: skipped (npm package ${fig.needs} is not installed: npm install)`);
    results.push({ ...fig, skippedBecause: `npm package ${fig.needs} is not installed` });
    continue;
  }
  const { arms, skipped } = fig.group === 'profilers' ? profilerArms() : allocatorArms('glibc,mimalloc,jemalloc,tcmalloc');
  const baseline = fig.group === 'profilers' ? 'mimalloc' : 'glibc';
  note(`bench/compare: ${fig.id}: ${shellLine(fig.shown)} × ${arms.map((a) => a.label).join(', ')}, ${blocks} blocks`);
  const t0 = Date.now();
  const result = await runCompare({
    command: fig.command,
    allocators: arms.map((a) => a.label).join(','),
    arms,
    skipped,
    baseline,
    blocks,
    warmup,
    seed,
    resamples: 10_000,
    confidence: 0.95,
    counts: fig.group === 'profilers' ? 'off' : 'once',
    timeout: quick ? 120 : 600,
    env,
    cwd: work,
    onRun: (e) => {
      if (e.result && !e.result.ok) note(`  ${e.arm}: run failed: ${e.result.failure}`);
    },
  });
  const labels = arms.map((a) => a.label);
  const pairs =
    fig.group === 'profilers'
      ? PROFILER_PAIRS.filter(([a, b]) => labels.includes(a) && labels.includes(b)).map(([a, b, what]) => {
          const s = analyse(result.runs, [b, a], b, blocks, seed, { resamples: 10_000, confidence: 0.95 });
          return { arm: a, against: b, what, effects: s.effects[a] };
        })
      : [];
  results.push({ ...fig, seconds: (Date.now() - t0) / 1000, result, pairs });
  note(`bench/compare: ${fig.id}: done in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

// ---- output -------------------------------------------------------------------------------------------
const machine = {
  cpu: cpus()[0]?.model.trim() ?? 'unknown',
  cores: cpus().length,
  kernel: release(),
  node: process.version,
  versions: {
    mimalloc: pkgVersion('libmimalloc2.0'),
    jemalloc: pkgVersion('libjemalloc2'),
    tcmalloc: pkgVersion('libgoogle-perftools4'),
    heaptrack: pkgVersion('heaptrack'),
    sharp: modVersion('sharp'),
    autocannon: modVersion('autocannon'),
  },
};
function pkgVersion(p) {
  const r = spawnSync('dpkg-query', ['-W', '-f=${Version}', p], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}
function modVersion(m) {
  try {
    return JSON.parse(readFileSync(join(root, 'node_modules', m, 'package.json'), 'utf8')).version;
  } catch {
    return null;
  }
}
const date = new Date().toISOString().slice(0, 10);
const metric = (id) => METRICS.find((m) => m.id === id);

function effectCell(r, arm, id) {
  const s = r.summary[arm]?.[id];
  if (!s || s.n === 0) return '—';
  const v = id === 'maxrssBytes' ? formatBytes(s.median) : formatSeconds(s.median);
  if (arm === r.baseline) return v;
  const e = r.effects[arm]?.[id];
  if (!e) return v;
  const t = `${e.ratio.toFixed(2)}× [${e.lower.toFixed(2)}, ${e.upper.toFixed(2)}]`;
  return `${v}<br>${e.significant ? `**${t}**` : t}`;
}

function allocatorTable(rows, id) {
  const arms = ['glibc', 'mimalloc', 'jemalloc', 'tcmalloc'];
  const md = [`| workload | ${arms.join(' | ')} | winner |`, `|---|${arms.map(() => '---:').join('|')}|---|`];
  for (const x of rows) {
    if (x.skippedBecause) {
      md.push(`| ${x.title} | ${arms.map(() => '—').join(' | ')} | not run: ${x.skippedBecause} |`);
      continue;
    }
    const r = x.result;
    const failed = Object.entries(r.failures).filter(([, f]) => f.failed > 0).map(([a, f]) => `${a} ${f.failed}/${f.of} failed`);
    md.push(`| ${x.title} | ${arms.map((a) => (r.arms.some((y) => y.label === a) ? effectCell(r, a, id) : 'not installed')).join(' | ')} | ${r.winners[id]?.text ?? ''}${failed.length ? ` (${failed.join(', ')})` : ''} |`);
  }
  return md;
}

function markdown() {
  const md = [BEGIN];
  md.push(`Measured ${date} with \`${COMMAND}\` (\`node bench/compare.mjs --write\`): ${blocks} paired blocks per figure, ${warmup} warm-up run per arm, order shuffled per block (seed ${seed}); each cell is the median over blocks and, below it, the effect against the baseline (exp of the median per-block log ratio) with its 95 % bootstrap interval (10 000 whole-block resamples), **bold** when the interval excludes 1. Winner: the arm with the lowest effect, with the arms not detectably different from it. Total time ${((Date.now() - started) / 60000).toFixed(0)} min.`);
  md.push('');
  md.push(`Machine: ${machine.cpu}, ${machine.cores} cores, Linux ${machine.kernel}, Node ${machine.node}; Debian libmimalloc2.0 ${machine.versions.mimalloc ?? '—'}, libjemalloc2 ${machine.versions.jemalloc ?? '—'}, libgoogle-perftools4 ${machine.versions.tcmalloc ?? '—'} (libtcmalloc_minimal.so.4), heaptrack ${machine.versions.heaptrack ?? '—'}; sharp ${machine.versions.sharp ?? '—'}, autocannon ${machine.versions.autocannon ?? '—'}. The machine is shared: load average ${results.find((x) => x.result)?.result.machine.loadBefore[0]?.toFixed(1) ?? '?'} at the start, so wall times are noisier than CPU times.`);
  const c = results.filter((x) => x.group === 'c');
  const n = results.filter((x) => x.group === 'node');
  for (const [title, rows] of [
    ['C workloads', c],
    ['Node workloads', n],
  ]) {
    if (rows.length === 0) continue;
    for (const [id, what] of [
      ['cpuS', 'CPU time (user+sys)'],
      ['wallS', 'wall time'],
      ['maxrssBytes', 'real memory (peak RSS)'],
    ]) {
      md.push('');
      md.push(`#### ${title}: ${what}, effect against glibc`);
      md.push('');
      md.push(...allocatorTable(rows, id));
    }
  }
  const p = results.find((x) => x.group === 'profilers' && x.result);
  if (p) {
    md.push('');
    md.push(`#### Heap profilers: cost on \`${shellLine(p.shown)}\``);
    md.push('');
    md.push('Each profiler against the same allocator without it (the same runs; pairs within blocks).');
    md.push('');
    md.push('| profiler | against | wall | CPU time | peak RSS |');
    md.push('|---|---|---:|---:|---:|');
    const cell = (e) => (e ? `${e.significant ? '**' : ''}${e.ratio.toFixed(3)}× [${e.lower.toFixed(3)}, ${e.upper.toFixed(3)}]${e.significant ? '**' : ''}` : 'n/a');
    for (const pair of p.pairs) md.push(`| ${pair.what} | ${pair.against === 'stopped' ? 'mimalloc-pprof stopped' : pair.against} | ${cell(pair.effects.wallS)} | ${cell(pair.effects.cpuS)} | ${cell(pair.effects.maxrssBytes)} |`);
    for (const s of p.result.skipped) md.push(`| ${s.label}: not measured (${s.reason}${s.package ? `, apt-get install ${s.package}` : ''}) | | | | |`);
    md.push('');
    md.push(`Medians: ${p.result.arms.map((a) => `${a.label} ${formatSeconds(p.result.summary[a.label].wallS.median)} wall, ${formatSeconds(p.result.summary[a.label].cpuS.median)} CPU, ${formatBytes(p.result.summary[a.label].maxrssBytes.median)}`).join('; ')}.`);
  }
  md.push('');
  md.push('<details><summary>The command of each figure (the same through the CLI)</summary>');
  md.push('');
  for (const x of results) {
    if (!x.result) continue;
    const arms = x.group === 'profilers'
      ? 'glibc,mimalloc,stopped=mimalloc-pprof,profiling=mimalloc-pprof-profiling,jemalloc,jeprof=jemalloc --env jeprof:MALLOC_CONF=prof:true,lg_prof_sample:19 (heaptrack: API only, a wrapping arm)'
      : 'glibc,mimalloc,jemalloc,tcmalloc';
    md.push(`- ${x.id}: \`mimalloc-pprof compare --allocators ${arms} --baseline ${x.result.baseline} --blocks ${blocks} --warmup ${warmup} --seed ${seed} -- ${shellLine(x.shown)}\``);
  }
  md.push('');
  md.push('</details>');
  md.push(END);
  return md.join('\n');
}

if (json) {
  console.log(JSON.stringify({ date, blocks, warmup, seed, quick, machine, figures: results.map(({ result, ...rest }) => ({ ...rest, result })) }, null, 2));
} else {
  console.log(markdown());
}
if (write) {
  const text = readFileSync(README, 'utf8');
  const b = text.indexOf(BEGIN);
  const e = text.indexOf(END);
  const block = markdown();
  const next = b >= 0 && e > b ? text.slice(0, b) + block + text.slice(e + END.length) : `${text}${text.endsWith('\n') ? '' : '\n'}\n${block}\n`;
  writeFileSync(README, next);
  const out = join(root, 'build', 'bench', 'compare.json');
  writeFileSync(out, JSON.stringify({ date, blocks, warmup, seed, machine, figures: results }, null, 2));
  note(`bench/compare: figures written to ${README} (all runs: ${out})`);
}
