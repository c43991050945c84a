/**
 * The end-to-end harness of growth's acceptance tests (issue 29): a leaking service of our
 * own under `run --every 1s` at the default sampling interval, driven by the test, then
 * `growth --json` on the periodic series. The first three rows of "where memory grows" must
 * name the leaking function with its file:line (as the chain's function or among the callers
 * carrying its slope), with a significant slope within ±30 % of the true rate (the requests
 * the driver saw answered × the bytes each keeps, over the time they took). Node's default
 * inlining is on. Only the periodic profiles taken while the driver ran are fitted: the
 * service's start before it and its idle end after it hold no growth, and a straight line
 * through those flat ends would understate the rate (by a third, seen under load).
 * Control: the same check on the cumulative ranking (growth's ranking before issue 29) fails:
 * its first rows are root frames with the same slope.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

import { readProfileFile } from '../../src/profile/files.js';
import { toNum } from '../../src/profile/model.js';
import { root, tempDir } from '../helpers.js';
import { assertFewUnnamed } from '../node-names.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const env = () => Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS'));

interface Row {
  name: string;
  via?: string[];
  programFunction?: string;
  bytesPerSecond: number;
  low: number;
  high: number;
  significant: boolean;
}

export interface Service {
  /** the service's script: it prints its port on stdout and ends after its one argument, in seconds */
  app: string;
  /** the leaking function, as growth names it: `name` at `line` of `app` */
  fn: string;
  line: number;
  /** bytes each answered request keeps */
  kept: number;
  /** how long the test drives it */
  seconds: number;
  /** drives the service on port for `seconds`: the requests answered and the seconds they took */
  drive: (port: number) => Promise<{ answered: number; seconds: number }>;
  /** variables for run (a control's) */
  env?: Record<string, string>;
  /** a control: the first three rows must not name `fn`, and must name one of these instead (its
   * callers: the memory charged to them), as the check names `fn` (at the rate, within ±30 %) */
  instead?: { fn: string; app: string; line: number }[];
}

export async function growthEndToEnd(s: Service): Promise<void> {
  const dir = tempDir('mpp-growth-e2e-');
  try {
    const child = spawn(process.execPath, [cli, 'run', '--every', '1s', '--top', '0', '--out', 'app.pb.gz', '--', process.execPath, s.app, String(s.seconds + 2)], {
      cwd: dir,
      env: { ...env(), ...s.env },
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
    const began = Date.now();
    const { answered, seconds } = await s.drive(port);
    const ended = Date.now();
    const truth = (answered * s.kept) / seconds;
    assert.equal(await exited, 0, stderr);

    const all = readdirSync(dir)
      .filter((f) => /^app\.\d+\.\d+\.pb\.gz$/.test(f))
      .map((f) => join(dir, f));
    const series = all.filter((f) => {
      const p = readProfileFile(f);
      assertFewUnnamed(p, f);
      const ms = toNum(p.timeNanos) / 1e6;
      return ms >= began && ms <= ended;
    });
    assert.ok(series.length >= 8, `${series.length} of ${all.length} periodic profiles taken while the driver ran`);
    const g = spawnSync(process.execPath, [cli, 'growth', '--json', ...series], { env: env(), encoding: 'utf8', timeout: 60_000 });
    assert.equal(g.status, 0, g.stderr);
    const out = JSON.parse(g.stdout) as { chains: Row[]; functions: Row[] };
    const keyOf = (fns: { fn: string; app: string; line: number }[]) =>
      new RegExp(`^(${fns.map((f) => `${f.fn.replace(/[()]/g, '\\$&')} ${f.app.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:${f.line}`).join('|')})$`);
    const shown = (rows: Row[]) => JSON.stringify(rows.slice(0, 3).map((r) => [r.name, r.bytesPerSecond, (r.via ?? []).slice(0, 8)]));
    const rowOf = (key: RegExp) => out.chains.slice(0, 3).find((r) => key.test(r.name) || (r.via ?? []).some((v) => key.test(v)));
    const own = [{ fn: s.fn, app: s.app, line: s.line }];
    if (s.instead) {
      assert.ok(!rowOf(keyOf(own)), `control: ${s.fn} is in the first 3 rows: ${shown(out.chains)}`);
    }
    const fn = s.instead ? s.instead.map((f) => f.fn).join(' or ') : s.fn;
    const key = keyOf(s.instead ?? own);
    const names = (r: Row) => key.test(r.name) || (r.via ?? []).some((v) => key.test(v));
    const row = rowOf(key);
    console.log(`# ${answered} requests in ${seconds.toFixed(1)} s: true rate ${(truth / 1048576).toFixed(3)} MiB/s; ${fn}'s row: ${row ? `${(row.bytesPerSecond / 1048576).toFixed(3)} MiB/s [${(row.low / 1048576).toFixed(3)}, ${(row.high / 1048576).toFixed(3)}]` : 'none'}; first rows: ${shown(out.chains)}`);
    assert.ok(row, `${fn} is not in the first 3 rows: ${shown(out.chains)}`);
    assert.ok(key.test(row.programFunction ?? ''), JSON.stringify(row.programFunction));
    assert.ok(row.significant, JSON.stringify(row));
    assert.ok(Math.abs(row.bytesPerSecond - truth) <= 0.3 * truth, `slope ${row.bytesPerSecond} against ${truth}`);
    // control: the cumulative ranking (who is on the stack) does not pass the same check
    if (!s.instead) assert.ok(!out.functions.slice(0, 3).some(names), `control: the cumulative ranking named it: ${shown(out.functions)}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** GET /item over one keep-alive connection at `rate` requests a second for `seconds`. */
export async function driveItems(port: number, rate: number, seconds: number): Promise<{ answered: number; seconds: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const get = () =>
    new Promise<void>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port, path: '/item', agent }, (res) => {
          res.resume();
          res.on('end', resolve);
        })
        .on('error', reject);
    });
  const started = Date.now();
  let answered = 0;
  while (Date.now() - started < seconds * 1000) {
    const due = started + (answered * 1000) / rate;
    if (Date.now() < due) await new Promise((r) => setTimeout(r, due - Date.now()));
    await get();
    answered++;
  }
  const took = (Date.now() - started) / 1000;
  agent.destroy();
  return { answered, seconds: took };
}
