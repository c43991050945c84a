/**
 * The resident set accounted for (src/profile/rss.ts, src/node/rss.cts): every part but
 * `other` is measured on its own, so `other` (RSS less the parts) is the account's error. The
 * gate: every part >= 0, and other and overcount (what the parts count beyond RSS) <= 5 % of RSS, at the exit profile `run` writes, at a profile taken mid-run
 * through the in-process API, and in profiler.stats(), on the bundled demo and on sharp.
 * An addon that maps 64 MiB itself through libc shows them under `libraries`; the positive
 * control maps them by the raw system call, which no part sees: the gate must fail, and
 * `other` must show those 64 MiB.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { parseRssBreakdown, rssParts, type RssBreakdown } from '../../src/profile/rss.js';
import { root, tempDir } from '../helpers.js';
import { decode } from './decode.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixture = join(root, 'test', 'run', 'fixtures', 'rss.mjs');
const MiB = 1 << 20;

function runWorkload(workload: string, env: Record<string, string> = {}) {
  const dir = tempDir('mpp-rss-');
  const out = join(dir, 'exit.pb.gz');
  const mid = join(dir, 'mid.pb.gz');
  const r = spawnSync(process.execPath, [cli, 'run', '--top', '3', '--out', out, '--', 'node', fixture], {
    encoding: 'utf8',
    cwd: root, // sharp resolves from the project's node_modules
    env: { ...process.env, RSS_WORKLOAD: workload, MID_OUT: mid, ...env },
    timeout: 240_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const breakdownOf = (path: string) => {
    const b = parseRssBreakdown(decode(path).profile);
    assert.ok(b, `${path} carries no rss_breakdown comment`);
    return b;
  };
  return {
    exit: breakdownOf(out),
    mid: breakdownOf(mid),
    stats: JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as RssBreakdown,
    stderr: r.stderr,
  };
}

const accounted = (b: RssBreakdown) => b.other <= 0.05 * b.rss && (b.overcount ?? 0) <= 0.05 * b.rss;
const show = (b: RssBreakdown) => rssParts(b).map((p) => `${p.name} ${(p.bytes / MiB).toFixed(1)}`).join(', ') + ` of RSS ${(b.rss / MiB).toFixed(1)} MiB`;

function checkAccount(t: { diagnostic(s: string): void }, where: string, b: RssBreakdown) {
  t.diagnostic(`${where}: ${show(b)}`);
  const sum = rssParts(b).reduce((a, p) => a + p.bytes, 0);
  // the parts sum to RSS, or to RSS and what they count beyond it (never a negative part)
  assert.ok(Math.abs(sum - b.rss - (b.overcount ?? 0)) <= 16, `${where}: the parts sum to ${sum}, not ${b.rss} + ${b.overcount ?? 0}`);
  for (const p of rssParts(b)) assert.ok(p.bytes >= 0, `${where}: ${p.name} is ${p.bytes}`);
  assert.ok(b.other >= 0 && (b.allocatorOverhead ?? 0) >= 0, `${where}: other ${b.other}, overhead ${b.allocatorOverhead}`);
  assert.ok(b.allocatorOverhead !== undefined, `${where}: mimalloc's mappings were not told apart`);
  assert.ok(b.runtime > 0 && b.code > 0 && b.stacks > 0 && b.nativeInUse > 0 && b.nativeStdError > 0, `${where}: a part is missing`);
  assert.ok(accounted(b), `${where}: other is ${(b.other / MiB).toFixed(1)} MiB, over 5 % of RSS`);
}

for (const workload of ['demo', 'sharp']) {
  describe(`the RSS breakdown of ${workload} under run`, () => {
    const r = runWorkload(workload);
    test('at exit (run\'s profile), mid-run (an in-process profile) and in profiler.stats(), the parts leave under 5 % of RSS', (t) => {
      checkAccount(t, 'exit', r.exit);
      checkAccount(t, 'mid-run', r.mid);
      checkAccount(t, 'stats', r.stats);
    });
    test('run prints it', () => {
      assert.match(r.stderr, /Resident set of node when profiled: /);
      assert.match(r.stderr, /allocator overhead/);
    });
  });
}

/** The 64 MiB addon, built once. */
function map64Addon(): string {
  const out = join(tempDir('mpp-map64-'), 'map64.node');
  const r = spawnSync('cc', ['-std=gnu11', '-O1', '-shared', '-fPIC', '-o', out, join(root, 'test', 'run', 'fixtures', 'map64.c')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return out;
}

describe('64 MiB mapped by an addon itself', () => {
  const addon = map64Addon();
  test('through libc: under libraries (named), and the account holds', (t) => {
    const r = runWorkload('demo', { MAP64_ADDON: addon, MAP64_MODE: 'libc' });
    for (const [where, b] of [['exit', r.exit], ['mid-run', r.mid]] as const) {
      checkAccount(t, where, b);
      assert.ok((b.libraries ?? 0) >= 64 * MiB && (b.libraries ?? 0) <= 64 * MiB + 0.05 * b.rss, `${where}: libraries ${((b.libraries ?? 0) / MiB).toFixed(1)} MiB`);
    }
    assert.match(r.stderr, /mapped by libraries themselves: map64\.node 64/);
  });

  test('positive control: by the raw system call, which no part sees, the gate fails and other shows the 64 MiB', (t) => {
    const r = runWorkload('demo', { MAP64_ADDON: addon, MAP64_MODE: 'raw' });
    for (const [where, b] of [['exit', r.exit], ['mid-run', r.mid]] as const) {
      t.diagnostic(`control, ${where}: ${show(b)}`);
      assert.equal(accounted(b), false, `${where}: the gate let 64 MiB of unclaimed memory through`);
      assert.ok(b.other >= 64 * MiB - 0.05 * b.rss && b.other <= 64 * MiB + 0.05 * b.rss, `${where}: other is ${(b.other / MiB).toFixed(1)} MiB`);
    }
  });
});
