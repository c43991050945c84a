/**
 * `run --every`: profiles written while the program runs, named, and read by growth. A Node
 * program leaks 1 MiB a second (by the clock) while another function keeps replacing 16 MiB;
 * with --every 1s the series has a profile a second, and growth marks the leak significant
 * with its slope within ±30 % of the truth and not the steady function. The interval is
 * 128 KiB so that each 1 MiB block is sampled with q = 1 − e^(−8) (the leak's estimate is then
 * all but exact: at the default interval q = 0.86 and one seed in twenty misses by more than
 * 30 % over eight seconds, which test/profile/growth.test.ts's interval accounts for).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, tempDir } from '../helpers.js';
import { mimallocLabel } from '../mimalloc.js';
import { readProfileFile } from '../../src/profile/files.js';
import { assertFewUnnamed } from '../node-names.js';

const MiB = 1 << 20;
const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const env = () => Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS'));

test(`run --every 1s: a named series while the program runs, which growth reads (${mimallocLabel})`, () => {
  const dir = tempDir('mpp-every-');
  try {
    const app = join(root, 'test', 'run', 'fixtures', 'leak-steady.mjs');
    const r = spawnSync(process.execPath, [cli, 'run', '--every', '1s', '--interval', '128k', '--seed', '7', '--top', '0', '--out', 'app.pb.gz', '--', process.execPath, '--expose-gc', app, '8'], {
      cwd: dir,
      env: env(),
      encoding: 'utf8',
      timeout: 120_000,
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /wrote \d+ periodic profiles of pid \d+: .*app\.\d+\.1\.pb\.gz … .*app\.\d+\.\d+\.pb\.gz/);
    const series = readdirSync(dir).filter((f) => /^app\.\d+\.\d+\.pb\.gz$/.test(f)).map((f) => join(dir, f));
    assert.ok(series.length >= 7, `${series.length} periodic profiles`);
    for (const f of series) assertFewUnnamed(readProfileFile(f), f);
    const g = spawnSync(process.execPath, [cli, 'growth', '--json', ...series], { env: env(), encoding: 'utf8' });
    assert.equal(g.status, 0, g.stderr);
    const out = JSON.parse(g.stdout) as { functions: { function: string; bytesPerSecond: number; significant: boolean }[] };
    const leak = out.functions.find((f) => f.function === 'leakyRegistry');
    const steady = out.functions.find((f) => f.function === 'steadyCache');
    assert.ok(leak && steady, g.stdout.slice(0, 1000));
    assert.ok(leak.significant && Math.abs(leak.bytesPerSecond - MiB) <= 0.3 * MiB, JSON.stringify(leak));
    assert.ok(!steady.significant, JSON.stringify(steady));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('run --every: a duration it cannot use is one line and exit 2, before the program runs', () => {
  const r = spawnSync(process.execPath, [cli, 'run', '--every', '5ms', '--', 'true'], { env: env(), encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /--every must be a duration from 100ms to 24h/);
});
