#!/usr/bin/env node
// Where a Node process's extra CPU under profiling goes, thread by thread (bench/README.md,
// "Per-thread CPU"): interleaved pairs of one workload under two arms, each run's threads polled
// every 20 ms (/proc/<pid>/task/<tid>/stat, utime + stime, the kernel's 10 ms ticks; a thread's
// last reading counts), summed per thread over the pairs: the main thread (tid = pid) and the
// others by creation order (Node names none of them on every version: V8's platform workers
// come first, then worker_threads and libuv's pool as they start).
//
//   node bench/thread-cpu.mjs [--pairs 10] [--workload http-workers|mix] [--arms stopped,profiling|keep,give|each,burst] [--json] [--quick]
//
// Arms: `stopped,profiling` (the library preloaded, profiling off / on at the default
// interval); `keep,give` (profiling, with the test-hooks build: the unwind tables' pages kept
// resident, MP_TEST_UNWIND_KEEP_PAGES=1 / handed back as the library does); `each,burst`
// (profiling, test-hooks build: the pages handed back at each walk's end,
// MP_TEST_UNWIND_GIVE_EACH=1 / a burst of walks at a time, as the library does).
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: {
    pairs: { type: 'string', default: '10' },
    workload: { type: 'string', default: 'http-workers' },
    arms: { type: 'string', default: 'stopped,profiling' },
    json: { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
  },
});
const die = (m) => {
  process.stderr.write(`bench/thread-cpu: ${m}\n`);
  process.exit(2);
};
const pairs = values.quick ? 1 : Number(values.pairs);
if (!(pairs >= 1)) die('--pairs must be at least 1');
const workloads = {
  'http-workers': ['http-workers.cjs', values.quick ? '200' : '3000'],
  mix: ['node-mix.cjs', values.quick ? '2' : '40'],
};
const workload = workloads[values.workload] ?? die(`--workload: one of ${Object.keys(workloads).join(', ')}`);
const production = process.env.MIMALLOC_PPROF_LIB ?? join(root, 'build', 'libmimalloc-pprof.so');
const hooks = join(root, 'build', 'test-hooks', 'libmimalloc-pprof.so');
const armSets = {
  'stopped,profiling': [
    ['stopped', { LD_PRELOAD: production }],
    ['profiling', { LD_PRELOAD: production, MIMALLOC_PROF: '1' }],
  ],
  'keep,give': [
    ['keep', { LD_PRELOAD: hooks, MIMALLOC_PROF: '1', MP_TEST_UNWIND_KEEP_PAGES: '1' }],
    ['give', { LD_PRELOAD: hooks, MIMALLOC_PROF: '1' }],
  ],
  'each,burst': [
    ['each', { LD_PRELOAD: hooks, MIMALLOC_PROF: '1', MP_TEST_UNWIND_GIVE_EACH: '1' }],
    ['burst', { LD_PRELOAD: hooks, MIMALLOC_PROF: '1' }],
  ],
};
const arms = armSets[values.arms] ?? die(`--arms: one of ${Object.keys(armSets).join(', ')}`);
for (const [, env] of arms) if (!existsSync(env.LD_PRELOAD)) die(`${env.LD_PRELOAD} is not built (npm test builds the test-hooks library)`);

/** One run: ticks per thread (main, then the others by creation order). */
function run(env) {
  return new Promise((resolve, reject) => {
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && !k.startsWith('MP_TEST_') && k !== 'LD_PRELOAD' && k !== 'NODE_OPTIONS'));
    const child = spawn(process.execPath, [join(root, 'bench', 'fixtures', workload[0]), workload[1]], { env: { ...clean, ...env }, stdio: 'ignore' });
    const last = new Map();
    const poll = () => {
      let tids = [];
      try {
        tids = readdirSync(`/proc/${child.pid}/task`);
      } catch {
        return;
      }
      for (const t of tids) {
        try {
          const stat = readFileSync(`/proc/${child.pid}/task/${t}/stat`, 'utf8');
          const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
          last.set(Number(t), Number(f[11]) + Number(f[12]));
        } catch {
          /* ended meanwhile: its last reading counts */
        }
      }
    };
    const timer = setInterval(poll, 20);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearInterval(timer);
      if (code !== 0) return reject(new Error(`${workload[0]} exited with ${code}`));
      const byThread = {};
      [...last.keys()].sort((a, b) => a - b).forEach((tid, i) => {
        const key = tid === child.pid ? 'main' : `thread ${String(i).padStart(2, '0')}`;
        byThread[key] = (byThread[key] ?? 0) + last.get(tid);
      });
      resolve(byThread);
    });
  });
}

const totals = Object.fromEntries(arms.map(([name]) => [name, {}]));
for (let i = 0; i < pairs; i++) {
  for (const [name, env] of i % 2 === 0 ? arms : [...arms].reverse()) {
    for (const [thread, ticks] of Object.entries(await run(env))) totals[name][thread] = (totals[name][thread] ?? 0) + ticks;
  }
}
const [a, b] = arms.map(([name]) => name);
const threads = [...new Set([...Object.keys(totals[a]), ...Object.keys(totals[b])])].sort();
const sum = (name) => Object.values(totals[name]).reduce((s, x) => s + x, 0);
const report = { workload: values.workload, pairs, arms: [a, b], ticksPerSecond: 100, threads: Object.fromEntries(threads.map((t) => [t, [totals[a][t] ?? 0, totals[b][t] ?? 0]])), total: [sum(a), sum(b)] };
if (values.json) {
  process.stdout.write(`${JSON.stringify(report)}\n`);
} else {
  for (const t of threads) console.log(`${t.padEnd(10)} ${a} ${String(totals[a][t] ?? 0).padStart(6)}  ${b} ${String(totals[b][t] ?? 0).padStart(6)}  ticks`);
  console.log(`total      ${a} ${report.total[0]}  ${b} ${report.total[1]}  ratio ${(report.total[1] / report.total[0]).toFixed(3)} (${pairs} pairs of ${values.workload}, 10 ms ticks)`);
}
