// How long reading V8's code log takes (src/symbolize/v8-log.ts, which `run` follows while the
// program runs and finishes after it ends): the log of `tsc -p . --noEmit` on this package,
// written by the Node running this script with the flags the exit hook turns on, parsed
// `--runs` times in this process (the first includes V8 compiling the parser).
//   node bench/v8-log-parse.mjs [--runs N] [--log FILE]
// --log FILE: parse that log instead of writing one.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({ options: { runs: { type: 'string', default: '6' }, log: { type: 'string' } } });
const runs = Number(values.runs);
if (!(runs >= 1)) {
  console.error('bench/v8-log-parse: --runs must be at least 1');
  process.exit(1);
}
const { parseV8Log } = await import(join(root, 'dist', 'src', 'symbolize', 'v8-log.js'));

let log = values.log;
const work = log ? undefined : mkdtempSync(join(tmpdir(), 'mpp-bench-v8log-'));
process.on('exit', () => work && rmSync(work, { recursive: true, force: true }));
if (!log) {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(
    process.execPath,
    ['--log-code', '--log-source-position', `--logfile=${join(work, 'v8.log')}`, '--no-logfile-per-isolate', tsc, '-p', root, '--noEmit'],
    { cwd: work, encoding: 'utf8' },
  );
  if (r.status !== 0) {
    console.error(`bench/v8-log-parse: tsc failed (status ${r.status}):\n${r.stdout}${r.stderr}`);
    process.exit(1);
  }
  log = join(work, readdirSync(work).find((f) => f.endsWith('.log')) ?? 'v8.log');
}
const data = readFileSync(log);
const ms = [];
let parsed;
for (let i = 0; i < runs; i++) {
  const t = process.hrtime.bigint();
  parsed = parseV8Log(data);
  ms.push(Number(process.hrtime.bigint() - t) / 1e6);
}
const sorted = [...ms].sort((a, b) => a - b);
const moves = data.toString('latin1').match(/^code-move,/gm)?.length ?? 0;
console.log(
  `${(statSync(log).size / 2 ** 20).toFixed(1)} MiB, ${parsed.codeObjects} code objects (${parsed.withInlining} with inlining), ${moves} code moves; ` +
    `Node ${process.versions.node}: ${ms.map((x) => x.toFixed(0)).join(', ')} ms (median ${sorted[Math.floor(sorted.length / 2)].toFixed(0)} ms)`,
);
