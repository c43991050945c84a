// growth's false positives, end to end: the steady-only program (test/run/fixtures/leak-steady.mjs
// with its leak off: 16 MiB of 64 KiB Buffers, 50 replaced a second) run REPS times under
// `mimalloc-pprof run --every 1s`, each with its own seed, and `growth --json` asked about every
// series. Counts how many runs mark any function significant, and steadyCache in particular.
//
//   node bench/growth-steady.mjs [--reps 20] [--interval 512k] [--seconds 8] [--control] [--json]
//
// --control fills the cache from the top level and replaces it from a timer: the timer's
// frames then truly gain what the top level loses (about 12 of 16 MiB over 8 s), and growth
// should mark them, which shows that the count of runs with a mark can move.
//
// The test suite checks the same method against simulated series (test/profile/growth.test.ts);
// this is the real thing, too slow for the suite (REPS × ~10 s).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const app = join(root, 'test', 'run', 'fixtures', 'leak-steady.mjs');
const { values } = parseArgs({
  options: {
    reps: { type: 'string', default: '20' },
    interval: { type: 'string', default: '512k' },
    seconds: { type: 'string', default: '8' },
    control: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS'));

const runs = [];
for (let seed = 1; seed <= Number(values.reps); seed++) {
  const dir = mkdtempSync(join(tmpdir(), 'mpp-growth-steady-'));
  try {
    const r = spawnSync(
      process.execPath,
      [cli, 'run', '--every', '1s', '--interval', values.interval, '--seed', String(seed), '--top', '0', '--out', 'app.pb.gz', '--', process.execPath, '--expose-gc', app, values.seconds, '0', ...(values.control ? ['top'] : [])],
      { cwd: dir, env, encoding: 'utf8', timeout: 120_000 },
    );
    if (r.status !== 0) throw new Error(`run (seed ${seed}) exited ${r.status}: ${r.stderr}`);
    const series = readdirSync(dir).filter((f) => /^app\.\d+\.\d+\.pb\.gz$/.test(f)).map((f) => join(dir, f));
    const g = spawnSync(process.execPath, [cli, 'growth', '--json', ...series], { env, encoding: 'utf8' });
    if (g.status !== 0) throw new Error(`growth (seed ${seed}) exited ${g.status}: ${g.stderr}`);
    const fns = JSON.parse(g.stdout).functions;
    const steady = fns.find((f) => f.name === 'steadyCache');
    const significant = fns.filter((f) => f.significant).map((f) => f.name);
    runs.push({ seed, profiles: series.length, steady: steady ?? null, significant });
    process.stderr.write(`bench/growth-steady: seed ${seed}: ${series.length} profiles, significant: ${significant.join(', ') || 'none'}\n`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const steadyFlagged = runs.filter((r) => r.steady?.significant).length;
const anyFlagged = runs.filter((r) => r.significant.length > 0).length;
if (values.json) {
  console.log(JSON.stringify({ control: values.control, interval: values.interval, seconds: Number(values.seconds), runs, steadyFlagged, anyFlagged }, null, 2));
} else {
  console.log(`${runs.length} runs of the steady-only program${values.control ? ' (control: filled at the top level)' : ''} at ${values.interval}, ${values.seconds} s, --every 1s:`);
  console.log(`steadyCache marked significant in ${steadyFlagged}; any function marked significant in ${anyFlagged}`);
  for (const r of runs) {
    const s = r.steady;
    console.log(`  seed ${r.seed}: ${r.profiles} profiles; steadyCache ${s ? `${(s.bytesPerSecond / 1024).toFixed(0)} KiB/s [${(s.low / 1024).toFixed(0)}, ${(s.high / 1024).toFixed(0)}]` : 'absent'}; significant: ${r.significant.join(', ') || 'none'}`);
  }
}
