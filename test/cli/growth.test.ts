/**
 * `mimalloc-pprof growth` on a real process: a Node program under the preload writes a
 * profile every second with the Node API's periodic dumps, while one function leaks 1 MiB/s
 * and another keeps replacing 16 MiB. The leak must be significant with its slope within
 * ±30 % of the truth, and the steady function must not be. At the default interval a 1 MiB
 * block is sampled with q = 1 − e^(−2) and the slope's standard error is about 0.15 MiB/s, so
 * ±30 % fails about one run in twenty; at 32 KiB (q = 1 − e^(−32)) the leak's estimate is all
 * but exact. The chain that names the leak starts at the allocator's leaf, which the steady
 * cache's 64 KiB blocks share: their estimate's spread per profile, about sqrt(256 (1 − q)/q)
 * blocks, is 20 blocks (1.3 MiB) at 128 KiB (q = 0.39), where the leaf's slope once came out
 * at 385 KiB/s, not significant (twice in four CI runs); at 32 KiB (q = 0.86) it is
 * 6 blocks (0.4 MiB). The statistic's calibration over many seeds is test/profile/growth.test.ts.
 */
import assert from 'node:assert/strict';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, runPreloaded, tempDir } from '../helpers.js';
import { encodeProfile } from '../../src/profile/proto.js';
import { makeProfile } from '../profile/util.js';
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
      { MIMALLOC_PROF: '1', MIMALLOC_PROF_ACCUM: '1', MIMALLOC_PROF_SEED: '7', MIMALLOC_PROF_SAMPLE_INTERVAL: '32768' },
    );
    if (r.status === 0) rmSync(`/tmp/perf-${/\d+/.exec(readdirSync(dir)[0] ?? '')?.[0] ?? 'none'}.map`, { force: true });
    assert.equal(r.status, 0, r.stderr);
    const files = readdirSync(dir).filter((f) => f.endsWith('.pb.gz')).map((f) => join(dir, f));
    assert.ok(files.length >= 5, `${files.length} dumps`); // a dump under way takes the next tick with it

    const g = await cli(['growth', '--json', ...files]);
    assert.equal(g.status, 0, g.stderr);
    const out = JSON.parse(g.stdout) as { functions: { name: string; function: string; bytesPerSecond: number; low: number; high: number; significant: boolean }[]; times: number[] };
    const leak = out.functions.find((f) => f.function === 'leakyRegistry');
    const steady = out.functions.find((f) => f.function === 'steadyCache');
    assert.ok(leak && steady, g.stdout.slice(0, 2000));
    assert.ok(leak.significant, `${JSON.stringify(leak)} over ${JSON.stringify(out.times)}`);
    assert.ok(Math.abs(leak.bytesPerSecond - MiB) <= 0.3 * MiB, `leak slope ${JSON.stringify(leak)} over ${JSON.stringify(out.times)}`);
    assert.ok(!steady.significant, `${JSON.stringify(steady)} over ${JSON.stringify(out.times)}`);
    // fastest growth first
    for (let i = 1; i < out.functions.length; i++) assert.ok(out.functions[i - 1]!.bytesPerSecond >= out.functions[i]!.bytesPerSecond, JSON.stringify(out.functions.slice(0, i + 1)));

    const text = await cli(['growth', ...files, '-n', '100000']);
    assert.equal(text.status, 0, text.stderr);
    // where memory grows: the leak's chain names it with its file and line
    assert.match(text.stdout, /grows\s+.* via .*leakyRegistry \S+growth-app\.mjs:\d+/);
    assert.doesNotMatch(text.stdout, /grows\s+.* via .*steadyCache/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('growth: fewer than two profiles, or two of the same moment, is one line and exit 2', async () => {
  const one = await cli(['growth', 'a.pb.gz']);
  assert.equal(one.status, 2);
  assert.match(one.stderr, /growth takes two or more FILEs/);
});

/** `n` profiles a second apart of process `pid`, leaking `rate` bytes a second (exact figures), written to `dir`. */
function writeSeries(dir: string, pid: number, rate: number, t0: number, n: number): string[] {
  return Array.from({ length: n }, (_, t) => {
    const p = makeProfile({
      types: [
        ['inuse_objects', 'count'],
        ['inuse_space', 'bytes'],
      ],
      period: 1,
      samples: [
        { stack: ['leak', 'main'], values: [t + 1, (t + 1) * rate] },
        { stack: ['steady', 'main'], values: [4, 4 * MiB] },
      ],
      comments: [`mimalloc-pprof interval=1 dropped_samples=0 live_samples=5 pid=${pid} peak_rss=${1e8 + t}`, `mimalloc-pprof 0.1.0 run --every: profile ${t + 1} of pid=${pid}`],
    });
    p.timeNanos = BigInt(Math.round((t0 + t) * 1e9));
    const path = join(dir, `app.${pid}.${t + 1}.pb.gz`);
    writeFileSync(path, encodeProfile(p));
    return path;
  });
}

test('growth over two processes: one analysis each (text and --json); none with two profiles is one line and exit 2', async () => {
  const dir = tempDir('mpp-growth-mixed-');
  try {
    const a = writeSeries(dir, 4242, MiB, 1_700_000_000, 5);
    const b = writeSeries(dir, 4343, 3 * MiB, 1_700_000_000.5, 4);
    const text = await cli(['growth', ...a, ...b]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /^2 processes among the profiles: one analysis each$/m);
    const sections = text.stdout.split(/^== /m).slice(1);
    assert.equal(sections.length, 2, text.stdout);
    assert.match(sections[0]!, /^pid 4242\n5 profiles over 4\.0 s/);
    assert.match(sections[0]!, /^1MiB\/s .* grows\s+leak via main$/m);
    assert.match(sections[1]!, /^pid 4343\n4 profiles over 3\.0 s/);
    assert.match(sections[1]!, /^3MiB\/s .* grows\s+leak via main$/m);
    const json = await cli(['growth', '--json', ...b, ...a]);
    assert.equal(json.status, 0, json.stderr);
    const out = JSON.parse(json.stdout) as { processes: { process: { pid: number }; chains: { name: string; bytesPerSecond: number }[] }[] };
    assert.deepEqual(
      out.processes.map((p) => [p.process.pid, Math.round(p.chains[0]!.bytesPerSecond)]),
      [
        [4242, MiB],
        [4343, 3 * MiB],
      ],
    );
    // one profile of each: nothing to fit anywhere
    const none = await cli(['growth', a[0]!, b[0]!]);
    assert.equal(none.status, 2);
    assert.equal(none.stderr.trim().split('\n').length, 1, none.stderr);
    assert.match(none.stderr, /no process has two profiles to fit \(pid 4242: 1 periodic profile: nothing to fit; pid 4343: 1 periodic profile: nothing to fit\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('growth: run\'s exit profile is listed as such and fitted only with --include-exit', async () => {
  const dir = tempDir('mpp-growth-exit-');
  try {
    const series = writeSeries(dir, 4242, MiB, 1_700_000_000, 5);
    const exit = makeProfile({
      types: [
        ['inuse_objects', 'count'],
        ['inuse_space', 'bytes'],
      ],
      period: 1,
      samples: [{ stack: ['leak', 'main'], values: [6, 6 * MiB] }],
      comments: ['mimalloc-pprof interval=1 pid=4242 peak_rss=100000009', 'mimalloc-pprof 0.1.0 run: interval=1 seed=none pid=4242', 'command: node app.js'],
    });
    exit.timeNanos = BigInt(1_700_000_005 * 1e9);
    const exitPath = join(dir, 'app.pb.gz');
    writeFileSync(exitPath, encodeProfile(exit));
    const text = await cli(['growth', ...series, exitPath]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /^pid 4242 \(node app\.js\): 5 profiles over 4\.0 s/);
    assert.match(text.stdout, /exit profile \(taken at exit, after a full garbage collection\) \S+app\.pb\.gz, 5\.0 s after the first: 6MiB in use; not fitted \(--include-exit fits it\)/);
    const json = (args: string[]) => cli(['growth', '--json', ...args]).then((r) => JSON.parse(r.stdout) as { times: number[]; profiles: { kind: string; fitted: boolean }[]; functions: { name: string; bytesPerSecond: number }[] });
    const without = await json([...series, exitPath]);
    assert.equal(without.times.length, 5);
    assert.deepEqual(without.profiles.map((p) => `${p.kind}:${p.fitted}`), [...Array(5).fill('periodic:true'), 'exit:false']);
    const withExit = await json(['--include-exit', ...series, exitPath]);
    assert.equal(withExit.times.length, 6);
    assert.ok(withExit.functions.find((f) => f.name === 'steady')!.bytesPerSecond < 0, 'the exit profile lacks the steady memory: fitted, it pulls the slope down');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
