/**
 * End to end (issue 29, acceptance): an express service of our own that leaks (fixtures/
 * leaky-express.mjs: every GET /session/:id keeps a 16 KiB Buffer in a module-level Map that
 * is never evicted, in rememberSession) under `run --every 1s` at the default sampling
 * interval, driven by autocannon (its programmatic API, 250 requests a second over 4
 * keep-alive connections for 11 s); then `growth --json` on the periodic series. The first
 * three rows of "where memory grows" must name rememberSession with its file:line, with a
 * significant slope within ±30 % of the true rate (autocannon's 2xx answers × 16 KiB over its
 * duration). Node's default inlining is on.
 * Control: the same check on the cumulative ranking fails: its first rows are root frames.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import autocannon from 'autocannon';

import { root, tempDir } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const app = join(root, 'test', 'cli', 'fixtures', 'leaky-express.mjs');
const env = () => Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS'));
const KEPT = 16 << 10;
const RATE = 250; // as growth-http: about 86 sampled blocks over the run, a standard error near 11 %
const DRIVE_SECONDS = 11;

interface Row {
  name: string;
  via?: string[];
  programFunction?: string;
  bytesPerSecond: number;
  low: number;
  high: number;
  significant: boolean;
}

test('a leaking express service under autocannon and run --every 1s: growth\'s first 3 rows name the leaking function with file:line at its rate (±30 %)', async () => {
  const dir = tempDir('mpp-growth-http-');
  try {
    const child = spawn(process.execPath, [cli, 'run', '--every', '1s', '--top', '0', '--out', 'app.pb.gz', '--', process.execPath, app, String(DRIVE_SECONDS + 2)], {
      cwd: dir,
      env: env(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    let buffered = '';
    const port = await new Promise<number>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        buffered += d.toString();
        const m = /^(\d+)\n/.exec(buffered);
        if (m) resolve(Number(m[1]));
      });
      void exited.then(() => reject(new Error(`the service ended before listening: ${stderr}`)));
    });
    const result = await autocannon({
      url: `http://127.0.0.1:${port}/session/user-42`,
      connections: 4,
      overallRate: RATE,
      duration: DRIVE_SECONDS,
    });
    const answered = result['2xx'];
    const truth = (answered * KEPT) / (result.duration);
    assert.equal(await exited, 0, stderr);

    const series = readdirSync(dir)
      .filter((f) => /^app\.\d+\.\d+\.pb\.gz$/.test(f))
      .map((f) => join(dir, f));
    assert.ok(series.length >= 10, `${series.length} periodic profiles`);
    const g = spawnSync(process.execPath, [cli, 'growth', '--json', ...series], { env: env(), encoding: 'utf8', timeout: 60_000 });
    assert.equal(g.status, 0, g.stderr);
    const out = JSON.parse(g.stdout) as { chains: Row[]; functions: Row[] };
    const key = new RegExp(`^rememberSession ${app.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:11$`);
    const names = (r: Row) => key.test(r.name) || (r.via ?? []).some((v) => key.test(v));
    const shown = (rows: Row[]) => JSON.stringify(rows.slice(0, 3).map((r) => [r.name, r.bytesPerSecond, (r.via ?? []).slice(0, 8)]));
    const row = out.chains.slice(0, 3).find(names);
    console.log(`# ${answered} requests in ${DRIVE_SECONDS} s: true rate ${(truth / 1048576).toFixed(3)} MiB/s; growth's row: ${row ? `${(row.bytesPerSecond / 1048576).toFixed(3)} MiB/s [${(row.low / 1048576).toFixed(3)}, ${(row.high / 1048576).toFixed(3)}]` : 'none'}`);
    assert.ok(row, `rememberSession is not in the first 3 rows: ${shown(out.chains)}`);
    assert.ok(key.test(row.programFunction ?? ''), JSON.stringify(row.programFunction));
    assert.ok(row.significant, JSON.stringify(row));
    assert.ok(Math.abs(row.bytesPerSecond - truth) <= 0.3 * truth, `slope ${row.bytesPerSecond} against ${truth}`);
    // control: the cumulative ranking (who is on the stack) does not pass the same check
    assert.ok(!out.functions.slice(0, 3).some(names), `control: the cumulative ranking named it: ${shown(out.functions)}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
