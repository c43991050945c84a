/**
 * `run --peak` against heaptrack on the same jobs (issue 11's acceptance): sqlite3 building a
 * 300 000-row table with an index (200 MB page cache), and python3 filling a 1.2 M-entry dict
 * (PYTHONMALLOC=malloc, so both tools see every object). The peak profile's in-use total must
 * be within ±15 % of heaptrack's "peak heap memory consumption" (decimal units: heaptrack's M
 * is 10⁶ bytes), and its top site the one heaptrack names first among the peak consumers.
 * The sampled peak is the high-water mark of an estimate, so it overshoots the true peak by
 * about its sampling error at that moment (the maximum of a noisy series): sqlite3's page
 * cache is 4 KiB pages, of which a 512 KiB interval samples under 1 %, a standard error near
 * 7 % of the peak; at the 64 KiB interval used here it is under 3 %, which leaves the 15 %
 * for what each tool counts (requested bytes; the copy is taken within 1/32 of the mark).
 *
 * The top site needs a peak that stands out from every other high point by more than a step
 * plus the estimate's noise, or a copy taken at that other point is the peak profile. The dict
 * has one: at its last resize (699 050 entries) the old and new key tables (21 + 42.6 MB) are
 * both live and new_keys_object leads, with 129 MB in use. Filled to 1 M entries the end is
 * only 5 MB above that, against a step of 4 MB and a standard error of the growth between the
 * two of sqrt(64 KiB * 26 MB) = 1.3 MB: the resize's copy stood for the peak in 5 of 16 runs.
 * At 1.2 M entries the end (151 MB, PyUnicode_New first) is 22 MB above it: past the step by
 * ten times the standard error of that growth (sqrt(64 KiB * 43 MB) = 1.7 MB).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { test } from 'node:test';

import { findSampleType, parseProfile, top } from '../../src/profile/index.js';
import { root, tempDir } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;

function env(extra: Record<string, string> = {}) {
  return { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS')), ...extra };
}

/** heaptrack's peak (bytes) and its first peak consumer's lines. */
function heaptrack(dir: string, cmd: string[], input: string | undefined, extra: Record<string, string> = {}): { peak: number; consumer: string } {
  const r = spawnSync('heaptrack', ['-o', join(dir, 'ht'), ...cmd], { cwd: dir, env: env(extra), input, encoding: 'utf8', timeout: 300_000 });
  assert.equal(r.status, 0, r.stderr);
  const file = readdirSync(dir).find((f) => f.startsWith('ht.'))!;
  const p = spawnSync('heaptrack_print', [join(dir, file)], { encoding: 'utf8', maxBuffer: 256 << 20 });
  rmSync(join(dir, file), { force: true });
  const m = /peak heap memory consumption: ([\d.]+)([BKMG])/.exec(p.stdout);
  assert.ok(m, p.stdout.slice(0, 2000));
  const unit = { B: 1, K: 1e3, M: 1e6, G: 1e9 }[m[2] as 'B' | 'K' | 'M' | 'G'];
  const consumer = /PEAK MEMORY CONSUMERS\n[^\n]*\n([^\n]*)\n([^\n]*)/.exec(p.stdout);
  return { peak: Number(m[1]) * unit, consumer: consumer ? `${consumer[1]}\n${consumer[2]}` : '' };
}

/** run --peak: the peak profile's in-use total and its top flat site. */
function peakOf(dir: string, cmd: string[], input: string | undefined, extra: Record<string, string> = {}): { total: number; top: string } {
  const r = spawnSync(process.execPath, [cli, 'run', '--peak', '--interval', '64k', '--main-only', '--top', '0', '--out', 'peak.pb.gz', '--', ...cmd], { cwd: dir, env: env(extra), input, encoding: 'utf8', timeout: 300_000 });
  assert.equal(r.status, 0, r.stderr);
  const p = parseProfile(readFileSync(join(dir, 'peak.pb.gz')));
  const rows = top(p, findSampleType(p, 'inuse_space'));
  const total = rows.reduce((a, row) => a + row.flat, 0);
  return { total, top: rows[0]!.name };
}

test('sqlite3 building a 300 000-row table with an index: the peak within 15 % of heaptrack\'s, in the same library', (t) => {
  if (!has('sqlite3') || !has('heaptrack')) return t.skip('sqlite3 and heaptrack come with the test set-up (scripts/setup-test.mjs)');
  const dir = tempDir('mpp-sqlite-');
  try {
    const sql = `PRAGMA cache_size=-200000;
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 300000)
INSERT INTO t SELECT x, 'name-' || x || '-' || hex(randomblob(16)), x * 0.5 FROM c;
CREATE INDEX ti ON t(name);
SELECT count(*) FROM t;
`;
    const ours = peakOf(dir, ['sqlite3', join(dir, 'a.sqlite')], sql);
    const theirs = heaptrack(dir, ['sqlite3', join(dir, 'b.sqlite')], sql);
    console.log(`# sqlite3: run --peak ${(ours.total / 1e6).toFixed(1)} MB, heaptrack ${(theirs.peak / 1e6).toFixed(1)} MB; top ${ours.top}`);
    assert.ok(Math.abs(ours.total - theirs.peak) <= 0.15 * theirs.peak, `ours ${ours.total}, heaptrack ${theirs.peak}`);
    // the library is stripped: both name it, not a function
    const lib = /\[(.+)\]/.exec(ours.top)?.[1] ?? ours.top;
    assert.ok(theirs.consumer.includes(lib) || theirs.consumer.includes(basename(lib)), `ours ${ours.top}; heaptrack:\n${theirs.consumer}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('python3 filling a 1.2 M-entry dict: the peak within 15 % of heaptrack\'s, and the same top function', (t) => {
  if (!has('python3') || !has('heaptrack')) return t.skip('python3 and heaptrack come with the test set-up');
  const dir = tempDir('mpp-python-');
  try {
    // the interpreter itself, not a version manager's shim that starts it
    const exe = spawnSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).stdout.trim();
    const job = [exe, '-c', 'd = {i: str(i) for i in range(1200000)}\ndel d\n'];
    writeFileSync(join(dir, 'job.txt'), job.join(' '));
    const ours = peakOf(dir, job, undefined, { PYTHONMALLOC: 'malloc' });
    const theirs = heaptrack(dir, job, undefined, { PYTHONMALLOC: 'malloc' });
    console.log(`# python3: run --peak ${(ours.total / 1e6).toFixed(1)} MB, heaptrack ${(theirs.peak / 1e6).toFixed(1)} MB; top ${ours.top}`);
    assert.ok(Math.abs(ours.total - theirs.peak) <= 0.15 * theirs.peak, `ours ${ours.total}, heaptrack ${theirs.peak}`);
    assert.equal(theirs.consumer.split('\n')[0]!.trim(), ours.top, theirs.consumer);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
