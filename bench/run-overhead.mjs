// What `mimalloc-pprof run` adds around a program: paired, interleaved runs of the same command
// plain and under `run` (the order inside each pair alternates), each timed from spawn to
// the program's first line (start), from its last line to the end of the process (after) and
// in total; medians of the per-pair differences (and of the ratio, for tsc).
//   node bench/run-overhead.mjs [--pairs N] [--tsc-pairs N] [--no-tsc] [--before DIR]
// --before DIR: a third arm, `run` of another checkout of this package (built, e.g. a `git
// worktree` of an earlier commit), in the same rounds: its figures and the change.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) : dflt);
const pairs = opt('--pairs', 7);
const tscPairs = opt('--tsc-pairs', 3);
const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const beforeDir = args.includes('--before') ? args[args.indexOf('--before') + 1] : undefined;
const beforeCli = beforeDir ? join(beforeDir, 'dist', 'src', 'cli', 'bin.js') : undefined;
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');

/** Runs argv; resolves {start, after, total} in ms (first and last stdout lines carry Date.now()). */
function timed(argv, cwd) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(argv[0], argv.slice(1), { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    child.on('exit', (code) => {
      const t1 = Date.now();
      if (code !== 0) return reject(new Error(`${argv.join(' ')}: status ${code}\n${err}`));
      const stamps = out.split('\n').flatMap((l) => (/^t=(\d+)$/.exec(l) ? [Number(l.slice(2))] : []));
      resolve({ start: stamps.length ? stamps[0] - t0 : NaN, after: stamps.length ? t1 - stamps[stamps.length - 1] : NaN, total: t1 - t0 });
    });
  });
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

async function bench(name, program, n, cwd) {
  const dir = mkdtempSync(join(tmpdir(), 'mpp-overhead-'));
  const underOf = (bin) => [process.execPath, bin, 'run', '--top', '0', '--out', join(dir, 'p.pb.gz'), '--', ...program];
  const arms = { plain: program, run: underOf(cli), ...(beforeCli ? { before: underOf(beforeCli) } : {}) };
  const names = Object.keys(arms);
  const d = { start: [], after: [], total: [], ratio: [], beforeTotal: [], beforeRatio: [] };
  const plainTotals = [];
  for (let i = 0; i < n; i++) {
    // every order of the arms in turn
    const order = names.map((_, k) => names[(i + k) % names.length]);
    if (i % 2 === 1) order.reverse();
    const r = {};
    for (const k of order) r[k] = await timed(arms[k], cwd ?? dir);
    for (const k of ['start', 'after', 'total']) d[k].push(r.run[k] - r.plain[k]);
    d.ratio.push(r.run.total / r.plain.total);
    if (r.before) {
      d.beforeTotal.push(r.before.total - r.plain.total);
      d.beforeRatio.push(r.before.total / r.plain.total);
    }
    plainTotals.push(r.plain.total);
    process.stderr.write(`${name} ${i + 1}/${n}: plain ${r.plain.total} ms, run ${r.run.total} ms (start +${r.run.start - r.plain.start}, after +${r.run.after - r.plain.after})${r.before ? `, before ${r.before.total} ms` : ''}\n`);
  }
  rmSync(dir, { recursive: true, force: true });
  return {
    name,
    n,
    plain: median(plainTotals),
    start: median(d.start),
    after: median(d.after),
    total: median(d.total),
    ratio: median(d.ratio),
    ...(beforeCli ? { beforeTotal: median(d.beforeTotal), beforeRatio: median(d.beforeRatio) } : {}),
  };
}

const stamp = 'console.log("t=" + Date.now())';
const results = [];
results.push(await bench('node -e 0', [process.execPath, '-e', `${stamp}; ${stamp}`], pairs));
results.push(await bench('a 1 s program', [process.execPath, '-e', `${stamp}; const k = []; const t = Date.now(); while (Date.now() - t < 1000) k.push(Buffer.alloc(4096)); ${stamp}`], pairs));
if (!args.includes('--no-tsc')) results.push(await bench('tsc -p . (this package, --noEmit)', [process.execPath, tsc, '-p', root, '--noEmit'], tscPairs, root));

const extra = beforeCli ? ' before: in total | before: run / plain |' : '';
console.log(`| program | pairs | plain (median) | run adds before its first line | after its last line | in total | run / plain |${extra}`);
console.log(`|---|---|---|---|---|---|---|${beforeCli ? '---|---|' : ''}`);
const f = (x) => (Number.isNaN(x) ? '—' : `${x >= 0 ? '+' : ''}${(x / 1000).toFixed(2)} s`);
for (const r of results) {
  const before = beforeCli ? ` ${f(r.beforeTotal)} | ${r.beforeRatio.toFixed(3)} |` : '';
  console.log(`| ${r.name} | ${r.n} | ${(r.plain / 1000).toFixed(2)} s | ${f(r.start)} | ${f(r.after)} | ${f(r.total)} | ${r.ratio.toFixed(3)} |${before}`);
}
