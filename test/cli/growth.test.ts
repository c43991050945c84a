/**
 * `mimalloc-pprof growth` on a real process: a Node program under the preload writes a
 * profile every second with the Node API's periodic dumps, while one function leaks 1 MiB/s
 * and another keeps replacing 16 MiB. The leak must be significant with its slope within
 * ±30 % of the truth, and the steady function must not be. At the default interval a 1 MiB
 * block is sampled with q = 1 − e^(−2) and the slope's standard error is about 0.15 MiB/s, so
 * ±30 % fails about one run in twenty; at 128 KiB (q = 1 − e^(−8)) the leak's estimate is all
 * but exact. The statistic's calibration over many seeds is test/profile/growth.test.ts.
 */
import assert from 'node:assert/strict';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, runPreloaded, tempDir } from '../helpers.js';
import { cli } from './util.js';

const MiB = 1 << 20;

test('growth --json over a Node program\'s periodic dumps: the leak grows at about 1 MiB/s, the steady cache does not', async () => {
  const dir = tempDir('mpp-growth-');
  try {
    const app = join(root, 'test', 'cli', 'fixtures', 'growth-app.mjs');
    const index = join(root, 'dist', 'src', 'index.js');
    const r = runPreloaded(
      process.execPath,
      ['--expose-gc', '--perf-basic-prof', '--interpreted-frames-native-stack', app, index, dir, '8', '1'],
      { MIMALLOC_PROF: '1', MIMALLOC_PROF_ACCUM: '1', MIMALLOC_PROF_SEED: '7', MIMALLOC_PROF_SAMPLE_INTERVAL: '131072' },
    );
    if (r.status === 0) rmSync(`/tmp/perf-${/\d+/.exec(readdirSync(dir)[0] ?? '')?.[0] ?? 'none'}.map`, { force: true });
    assert.equal(r.status, 0, r.stderr);
    const files = readdirSync(dir).filter((f) => f.endsWith('.pb.gz')).map((f) => join(dir, f));
    assert.ok(files.length >= 5, `${files.length} dumps`); // a dump under way takes the next tick with it

    const g = await cli(['growth', '--json', ...files]);
    assert.equal(g.status, 0, g.stderr);
    const out = JSON.parse(g.stdout) as { functions: { name: string; bytesPerSecond: number; low: number; high: number; significant: boolean }[]; times: number[] };
    const leak = out.functions.find((f) => f.name === 'leakyRegistry');
    const steady = out.functions.find((f) => f.name === 'steadyCache');
    assert.ok(leak && steady, g.stdout.slice(0, 2000));
    assert.ok(leak.significant, JSON.stringify(leak));
    assert.ok(Math.abs(leak.bytesPerSecond - MiB) <= 0.3 * MiB, `leak slope ${leak.bytesPerSecond}`);
    assert.ok(!steady.significant, JSON.stringify(steady));
    // fastest growth first
    for (let i = 1; i < out.functions.length; i++) assert.ok(out.functions[i - 1]!.bytesPerSecond >= out.functions[i]!.bytesPerSecond);

    const text = await cli(['growth', ...files, '-n', '100000']);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /grows\s+leakyRegistry$/m);
    assert.match(text.stdout, /^\s*\S+\/s\s+\S+\/s … \S+\/s\s+steadyCache$/m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('growth: fewer than two profiles, or two of the same moment, is one line and exit 2', async () => {
  const one = await cli(['growth', 'a.pb.gz']);
  assert.equal(one.status, 2);
  assert.match(one.stderr, /growth takes two or more FILEs/);
});
