// What `mimalloc-pprof run` adds around a program: paired, interleaved runs of the same command
// plain and under `run` (the order inside each pair alternates), each timed from spawn to
// the program's first line (start), from its last line to the end of the process (after) and
// in total; medians of the per-pair differences (and of the ratio, for tsc).
//   node bench/run-overhead.mjs [--pairs N] [--tsc-pairs N] [--no-tsc]
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
  const under = [process.execPath, cli, 'run', '--top', '0', '--out', join(dir, 'p.pb.gz'), '--', ...program];
  const d = { start: [], after: [], total: [], ratio: [] };
  const plainTotals = [];
  for (let i = 0; i < n; i++) {
    const order = i % 2 === 0 ? ['plain', 'run'] : ['run', 'plain'];
    const r = {};
    for (const k of order) r[k] = await timed(k === 'plain' ? program : under, cwd ?? dir);
    for (const k of ['start', 'after', 'total']) d[k].push(r.run[k] - r.plain[k]);
    d.ratio.push(r.run.total / r.plain.total);
    plainTotals.push(r.plain.total);
    process.stderr.write(`${name} ${i + 1}/${n}: plain ${r.plain.total} ms, run ${r.run.total} ms (start +${r.run.start - r.plain.start}, after +${r.run.after - r.plain.after})\n`);
  }
  rmSync(dir, { recursive: true, force: true });
  return { name, n, plain: median(plainTotals), start: median(d.start), after: median(d.after), total: median(d.total), ratio: median(d.ratio) };
}

const stamp = 'console.log("t=" + Date.now())';
const results = [];
results.push(await bench('node -e 0', [process.execPath, '-e', `${stamp}; ${stamp}`], pairs));
results.push(await bench('a 1 s program', [process.execPath, '-e', `${stamp}; const k = []; const t = Date.now(); while (Date.now() - t < 1000) k.push(Buffer.alloc(4096)); ${stamp}`], pairs));
if (!args.includes('--no-tsc')) results.push(await bench('tsc -p . (this package, --noEmit)', [process.execPath, tsc, '-p', root, '--noEmit'], tscPairs, root));

console.log(`| program | pairs | plain (median) | run adds before its first line | after its last line | in total | run / plain |`);
console.log(`|---|---|---|---|---|---|---|`);
const f = (x) => (Number.isNaN(x) ? '—' : `${x >= 0 ? '+' : ''}${(x / 1000).toFixed(2)} s`);
for (const r of results) {
  console.log(`| ${r.name} | ${r.n} | ${(r.plain / 1000).toFixed(2)} s | ${f(r.start)} | ${f(r.after)} | ${f(r.total)} | ${r.ratio.toFixed(3)} |`);
}
