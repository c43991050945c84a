#!/usr/bin/env node
// The cost of the Node features on top of native profiling at the default interval, each
// against the same runs without it. Paired blocks, order shuffled per block, bootstrap
// intervals (compare's machinery):
//  - the thread-pool watch (native/src/pool.c, docs/thread-pool.md; MIMALLOC_PPROF_POOL=0 off):
//    async deflate of many small chunks (bench/fixtures/zlib-chunks.mjs, one pool item per
//    chunk), and many cheap items (bench/fixtures/pool-items.mjs, fs.stat) for the CPU per
//    queued item;
//  - the JavaScript heap beside the native one (V8's sampling heap profiler, as run and
//    pprofHandler start it): node-mix's workload (bench/fixtures/js-heap-mix.mjs).
//
//   node bench/node-features.mjs [--quick] [--json] [--write] [--blocks=N]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist', 'src', 'compare');
const { parseAllocators, resolveAllocators } = await import(join(dist, 'allocators.js'));
const { runCompare } = await import(join(dist, 'compare.js'));
const { formatSeconds, formatBytes } = await import(join(dist, 'report.js'));
const { baseEnvironment } = await import(join(dist, 'runner.js'));

const args = process.argv.slice(2);
for (const a of args) if (!/^--(quick|json|write|blocks=\d+)$/.test(a)) die(`unknown argument ${a} (see the head of bench/node-features.mjs)`);
const quick = args.includes('--quick');
const write = args.includes('--write');
if (write && quick) die('--write records full runs only; drop --quick');
const blocks = Number(args.find((a) => a.startsWith('--blocks='))?.slice(9) ?? (quick ? 2 : 20));
const seed = 20261202;

function die(message) {
  console.error(`bench/node-features: ${message}`);
  process.exit(1);
}

const work = mkdtempSync(join(tmpdir(), 'mpp-bench-features-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

/** Arms of the preload library (profiling) that differ only by environment. */
function armsOf(envs) {
  const { arms, skipped } = resolveAllocators(parseAllocators(Object.keys(envs).map((k) => `${k}=mimalloc-pprof-profiling`).join(',')));
  for (const a of arms) Object.assign(a.env, envs[a.label]);
  return { arms, skipped };
}

async function measure(fixture, arg, envs) {
  const shown = `node bench/fixtures/${fixture} ${arg}`;
  const { arms, skipped } = armsOf(envs);
  console.error(`bench/node-features: ${shown} × ${arms.map((a) => a.label).join(', ')}; ${blocks} blocks`);
  const result = await runCompare({
    command: [process.execPath, join(root, 'bench', 'fixtures', fixture), arg],
    allocators: arms.map((a) => a.label).join(','),
    arms,
    skipped,
    baseline: 'off',
    blocks,
    warmup: quick ? 0 : 1,
    seed,
    resamples: 10_000,
    confidence: 0.95,
    counts: 'off',
    timeout: 300,
    env: baseEnvironment(),
    cwd: work,
  });
  const failed = Object.entries(result.failures).filter(([, f]) => f.failed > 0);
  if (failed.length > 0) die(`runs failed: ${failed.map(([a, f]) => `${a} ${f.failed}/${f.of}`).join(', ')}`);
  const e = result.effects.on;
  return { shown, figures: { wall: e.wallS, cpu: e.cpuS, rss: e.maxrssBytes }, summary: result.summary };
}

const chunks = await measure('zlib-chunks.mjs', quick ? '500' : '20000', { off: { MIMALLOC_PPROF_POOL: '0' }, on: { MIMALLOC_PPROF_POOL: '1' } });
// The cost per item, split: the test-hooks build's arm without the capture
// (MP_TEST_POOL_NO_CAPTURE) tracks and wraps every item but takes no stack.
const hooks = join(root, 'build', 'test-hooks', 'libmimalloc-pprof.so');
if (!existsSync(hooks)) die(`${hooks} is missing: make -C native test-hooks BUILD=../build/test-hooks (npm test builds it)`);
process.env.MIMALLOC_PPROF_LIB = hooks;
const itemCount = quick ? 2000 : 100000;
const items = await measure('pool-items.mjs', String(itemCount), {
  off: { MIMALLOC_PPROF_POOL: '0' },
  nocapture: { MIMALLOC_PPROF_POOL: '1', MP_TEST_POOL_NO_CAPTURE: '1' },
  on: { MIMALLOC_PPROF_POOL: '1' },
});
// The poster's own time per wrapped item (the wrap under the pool's mutex and the stack
// capture after it), timed inside the library (test-hooks build, MP_TEST_POOL_TIMING=1): what
// the watch itself costs, apart from what a slower poster does to the pool's scheduling.
function posterNs(fixture, arg) {
  const runs = [];
  for (let i = 0; i < (quick ? 1 : 7); i++) {
    const r = spawnSync(process.execPath, [join(root, 'bench', 'fixtures', fixture), arg], {
      cwd: work,
      encoding: 'utf8',
      env: { ...process.env, LD_PRELOAD: hooks, MIMALLOC_PROF: '1', MP_TEST_POOL_TIMING: '1' },
    });
    const m = /mp_pool_timing items=(\d+) ns=(\d+) clock_ns=(\d+)/.exec(r.stderr ?? '');
    if (r.status !== 0 || !m || Number(m[1]) === 0) die(`${fixture}: no timing (status ${r.status}): ${(r.stderr ?? '').slice(-300)}`);
    runs.push(Number(m[2]) / Number(m[1]) - 2 * Number(m[3])); // less a clock reading per timed interval (two)
  }
  runs.sort((a, b) => a - b);
  return { median: runs[Math.floor(runs.length / 2)], min: runs[0], max: runs[runs.length - 1], runs: runs.length };
}
const posterItems = posterNs('pool-items.mjs', String(itemCount));
const posterChunks = posterNs('zlib-chunks.mjs', quick ? '500' : '20000');
// the JavaScript heap sampler: measured with the production library again
delete process.env.MIMALLOC_PPROF_LIB;
const jsHeap = await measure('js-heap-mix.mjs', quick ? '1' : '15', { off: { JS_HEAP: '0' }, on: { JS_HEAP: '1' } });
const med = (r, arm, id) => r.summary[arm][id].median;
// user+sys CPU per item (both threads): the differences of the arms' medians over the items
const perItem = (a, b) => ((med(items, a, 'cpuS') - med(items, b, 'cpuS')) / itemCount) * 1e9;
const perItemNs = perItem('on', 'off');
const captureNs = perItem('on', 'nocapture');
const trackingNs = perItem('nocapture', 'off');
const cell = (x) => `${x.ratio.toFixed(3)}× [${x.lower.toFixed(3)}, ${x.upper.toFixed(3)}]`;
const row = (what, r) => `| ${what} | \`${r.shown}\` | ${cell(r.figures.wall)} | ${cell(r.figures.cpu)} | ${cell(r.figures.rss)} | off ${formatSeconds(med(r, 'off', 'wallS'))} / on ${formatSeconds(med(r, 'on', 'wallS'))} |`;
const lines = [
  '| feature, on against off (profiling at 512 KiB) | workload | wall | CPU time | peak RSS | median wall |',
  '|---|---|---:|---:|---:|---:|',
  row('thread-pool watch', chunks),
  row('thread-pool watch', items),
  row('JavaScript heap sampling', jsHeap),
  '',
  `CPU per queued item (the arms' median differences over ${itemCount} fs.stat, each queued from a completion): ${perItemNs.toFixed(0)} ns in all, of which the stack capture ${captureNs.toFixed(0)} ns (against the test-hooks arm that tracks items without it) and the tracking ${trackingNs.toFixed(0)} ns.`,
  '',
  `The poster's own time per queued item (wrap + stack capture, timed inside the library, median of ${posterItems.runs} runs): **${posterItems.median.toFixed(0)} ns** on fs.stat from completions (${posterItems.min.toFixed(0)}–${posterItems.max.toFixed(0)}), **${posterChunks.median.toFixed(0)} ns** on deflate chunks (${posterChunks.min.toFixed(0)}–${posterChunks.max.toFixed(0)}); net of one clock reading's time per timed interval (two per item).`,
];
if (args.includes('--json')) console.log(JSON.stringify({ blocks, figures: chunks.figures, items: items.figures, jsHeap: jsHeap.figures, perItemNs, captureNs, trackingNs, posterItemsNs: posterItems.median, posterChunksNs: posterChunks.median }, null, 2));
else console.log(lines.join('\n'));
if (write) {
  const readme = join(root, 'bench', 'README.md');
  const BEGIN = '<!-- node-features:begin -->';
  const END = '<!-- node-features:end -->';
  const block = [
    BEGIN,
    `Measured ${new Date().toISOString().slice(0, 10)} with \`node bench/node-features.mjs --write\`: ${blocks} paired blocks, order shuffled per block (seed ${seed}), effect = exp of the median per-block log ratio with its 95 % bootstrap interval; ${cpus()[0]?.model.trim() ?? 'unknown CPU'}, ${cpus().length} cores, Node ${process.version}.`,
    '',
    ...lines,
    END,
  ].join('\n');
  const text = readFileSync(readme, 'utf8');
  const b = text.indexOf(BEGIN);
  const x = text.indexOf(END);
  writeFileSync(readme, b >= 0 && x > b ? text.slice(0, b) + block + text.slice(x + END.length) : `${text}\n${block}\n`);
  console.error(`bench/node-features: written to ${readme}`);
}
