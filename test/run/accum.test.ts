/**
 * `run` profiles carry what was allocated over the whole run beside what is in use at exit,
 * and `run --peak` the in-use figures of the high-water mark: a C program keeps 5 MiB, builds
 * 100 MiB, frees it. In use at exit: keep_some ≈ 5 MiB; allocated: build_peak ≈ 100 MiB; at
 * the peak: both, build_peak within ±10 % and keep_some within ±25 % (the bounds).
 *
 * Those bounds are only worth asserting where the estimates cannot stray past them by chance,
 * so the fixture's block sizes are chosen for them and the test checks that each bound covers
 * 4 standard errors of its Horvitz–Thompson estimate at the default 512 KiB interval, where a
 * block of s bytes is sampled with q = 1 − e^(−s/R) and n of them have
 * sd = s · √(n (1 − q) / q): 25 blocks of 4 MiB give 0.37 MiB (4 sd = 1.5 % of 100 MiB),
 * 2 blocks of 2.5 MiB 0.29 MiB (4 sd = 23 % of 5 MiB). In 1 MiB blocks 4 sd would be 17 %
 * of 100 MiB, and in 64 KiB blocks 122 % of 5 MiB: no sampled profile can promise ±25 % there.
 * The peak snapshot is taken within a step (1/32 of the peak, at least 1 MiB) plus the lag of
 * the running estimate (less than 1 MiB, table.c) below the high-water mark, which the peak
 * bound adds. The run also says where to look.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { findSampleType, parseProfile, top } from '../../src/profile/index.js';
import { root, tempDir } from '../helpers.js';

const MiB = 1 << 20;
const R = 512 * 1024;
const STEP = (bytes: number) => Math.max(bytes / 32, MiB);
const LAG = MiB;
const PEAK = { blocks: 25, size: 4 * MiB, bound: 0.1 * 100 * MiB };
const KEPT = { blocks: 2, size: 2.5 * MiB, bound: 0.25 * 5 * MiB };
const sd = (blocks: number, size: number) => size * Math.sqrt((blocks * Math.exp(-size / R)) / -Math.expm1(-size / R));

test('the fixture supports the bounds: each covers 4 standard errors of its estimate (and the peak its step and lag)', () => {
  assert.ok(4 * sd(PEAK.blocks, PEAK.size) + STEP(105 * MiB) + LAG <= PEAK.bound, `peak: ${4 * sd(PEAK.blocks, PEAK.size) + STEP(105 * MiB) + LAG}`);
  assert.ok(4 * sd(KEPT.blocks, KEPT.size) <= KEPT.bound, `kept: ${4 * sd(KEPT.blocks, KEPT.size)}`);
  // The control: the blocks this fixture once had (1 MiB, 64 KiB) cannot support them.
  assert.ok(4 * sd(100, MiB) + STEP(105 * MiB) + LAG > PEAK.bound);
  assert.ok(4 * sd(80, 64 << 10) > KEPT.bound);
});

test('run: allocated totals beside in use, and a hint when far more was allocated than kept', () => {
  const dir = tempDir('mpp-accum-');
  try {
    const exe = join(dir, 'peak_then_free');
    const cc = spawnSync('cc', ['-O1', '-g', '-fno-omit-frame-pointer', '-o', exe, join(root, 'test', 'run', 'fixtures', 'peak_then_free.c')], { encoding: 'utf8' });
    assert.equal(cc.status, 0, cc.stderr);
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_')));
    const r = spawnSync(process.execPath, [join(root, 'dist', 'src', 'cli', 'bin.js'), 'run', '--seed', '3', '--out', 'p.pb.gz', '--', exe], { cwd: dir, env, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const p = parseProfile(readFileSync(join(dir, 'p.pb.gz')));
    const cum = (type: string, fn: string) => top(p, findSampleType(p, type)).find((row) => row.name === fn)?.cum ?? 0;

    const kept = cum('inuse_space', 'keep_some');
    assert.ok(Math.abs(kept - 5 * MiB) <= KEPT.bound, `in use at exit, keep_some: ${kept}`);
    assert.equal(cum('inuse_space', 'build_peak'), 0, 'freed before exit');
    const built = cum('alloc_space', 'build_peak');
    assert.ok(Math.abs(built - 100 * MiB) <= 4 * sd(PEAK.blocks, PEAK.size), `allocated, build_peak: ${built}`);
    assert.match(r.stderr, /was allocated over the run, .* was in use at exit; where it was allocated: mimalloc-pprof top \S*p\.pb\.gz --sample-index alloc_space/);
    // control for the peak's labels: a run without --peak says "at exit", never "at the peak"
    assert.doesNotMatch(r.stderr, /at the peak/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('run --peak: the profile at the high-water mark (both functions), its comment saying how much and when', () => {
  const dir = tempDir('mpp-peak-');
  try {
    const exe = join(dir, 'peak_then_free');
    const cc = spawnSync('cc', ['-O1', '-g', '-fno-omit-frame-pointer', '-o', exe, join(root, 'test', 'run', 'fixtures', 'peak_then_free.c')], { encoding: 'utf8' });
    assert.equal(cc.status, 0, cc.stderr);
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_')));
    const r = spawnSync(process.execPath, [join(root, 'dist', 'src', 'cli', 'bin.js'), 'run', '--peak', '--seed', '3', '--out', 'p.pb.gz', '--', exe], { cwd: dir, env, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    // issue 29 (6): "at the peak" everywhere, with the estimate's standard error and when
    const line = /in-use memory of peak_then_free \(pid \d+\) at the peak: (\S+) ± (\S+) \(1 standard error\), reached (\d{4}-\S+Z) \((\d+\.\d) s after the run started\)/.exec(r.stderr);
    assert.ok(line, r.stderr);
    assert.doesNotMatch(r.stderr, /at exit/, 'a peak run says nothing is "at exit"');
    const p = parseProfile(readFileSync(join(dir, 'p.pb.gz')));
    const cum = (type: string, fn: string) => top(p, findSampleType(p, type)).find((row) => row.name === fn)?.cum ?? 0;
    const built = cum('inuse_space', 'build_peak');
    assert.ok(Math.abs(built - 100 * MiB) <= PEAK.bound, `at the peak, build_peak: ${built}`);
    const kept = cum('inuse_space', 'keep_some');
    assert.ok(Math.abs(kept - 5 * MiB) <= KEPT.bound, `at the peak, keep_some: ${kept}`);
    const comment = p.comment.map((c) => p.stringTable.strings[Number(c)] ?? '').find((c) => c.startsWith('peak: '));
    const m = /^peak: estimated_in_use_bytes=(\d+) at_unix_ms=(\d+)$/.exec(comment ?? '');
    assert.ok(m, `no peak comment: ${p.comment.map((c) => p.stringTable.strings[Number(c)]).join(' | ')}`);
    const total = top(p, findSampleType(p, 'inuse_space')).reduce((a, row) => a + row.flat, 0);
    assert.ok(Math.abs(Number(m[1]) - total) <= 0.01 * total, `comment ${m[1]}, profile ${total}`);
    assert.ok(Math.abs(Number(m[2]) - Date.now()) < 120_000, 'the peak was reached during this run');
    // the profile says so too, and its time is the peak's
    const said = p.comment.map((c) => p.stringTable.strings[Number(c)] ?? '').find((c) => c.startsWith('at the peak: '));
    assert.match(said ?? '', / ± \S+ \(1 standard error\), reached \d{4}-/, said);
    // in integers: a time in ns is past 2^53, so a float division can miss the ms by a rounding
    assert.equal(BigInt(p.timeNanos), BigInt(m[2]!) * 1_000_000n);
    assert.equal(new Date(Number(m[2])).toISOString(), line[3]);
    // the standard error: 25 blocks of 4 MiB and 2 of 2.5 MiB at R = 512 KiB, N s²(1−q)/q (the expectation of Σ s²(1−q)/q² over the sampled)
    const v = (s: number, n: number) => { const q = -Math.expm1(-s / 524288); return (n * s * s * (1 - q)) / q; };
    const se = Math.sqrt(v(4 * MiB, 25) + v(2.5 * MiB, 2));
    const printed = Number(/^([\d.]+)KiB$/.exec(line[2] ?? '')?.[1]) * 1024;
    assert.ok(Math.abs(printed - se) <= 0.3 * se, `standard error printed ${line[2]}, expected about ${(se / 1024).toFixed(0)}KiB`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
