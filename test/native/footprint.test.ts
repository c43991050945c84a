/** What profiling adds to a Node process's memory, by construction: the profiler's own
 * anonymous memory (`# profiler_resident`: its mappings, its static tables and its record of
 * mappings, counted with mincore, native/src/resident.c), what its sampled blocks hold in the
 * program's heap beyond their requests at the peak (`# sampled_rounding_bytes` of the peak
 * profile: blocks rounded up to where the free filter looks, sampler.c), plus the file pages
 * that profiling adds against the same run stopped (test/native/fixtures/node-footprint.cjs:
 * every library's, and of node's own only its unwind tables, 3.4 MB that are read through the
 * mapping and handed back page by page; V8 touches node's code and constants differently in each run). The gate is the budget of the benchmark's issue: at most
 * 2 % of the live heap at its peak, the peak profile's own estimate, on the benchmark's workload
 * (bench/fixtures/node-mix.cjs). Peak RSS itself cannot be gated: V8's heap moves it by MiBs
 * from run to run (bench/README.md).
 *
 * Positive controls, each of which the same gate must reject: the unwind tables' pages kept
 * after the walks read them (MP_TEST_UNWIND_KEEP_PAGES: the file part), and 1 MiB of profiler
 * memory held from start (MP_TEST_BALLAST: the anonymous part). */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, targetNode, tempDir } from '../helpers.js';
import { MUSL_NO_NODE, mimallocLabel, onCross, onMusl } from '../mimalloc.js';
import { buildTestHooks, runUnder } from '../reliability/util.js';

const SHARE = 0.02;

interface Footprint {
  fileKiB: number;
  ownKiB?: number;
  roundingKiB?: number;
  livePeakKiB?: number;
}

/** File offsets of node's .eh_frame_hdr and the end of its .eh_frame. */
function unwindTables(): [number, number] {
  const r = spawnSync('readelf', ['-SW', realpathSync(targetNode)], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const section = (name: string) => {
    const m = new RegExp(`\\${name}\\s+\\S+\\s+[0-9a-f]+\\s+([0-9a-f]+)\\s+([0-9a-f]+)`).exec(r.stdout);
    assert.ok(m, `node has no ${name}`);
    return [parseInt(m[1]!, 16), parseInt(m[2]!, 16)] as const;
  };
  const [hdr] = section('.eh_frame_hdr');
  const [frames, size] = section('.eh_frame ');
  return [hdr, frames + size];
}
const EH = unwindTables();

/** node-mix 40 under the test-hooks library: the file pages profiling can add, at the end of
 * the script, and, when profiling, the exit profile's profiler_resident and the peak profile's
 * estimate. */
function nodeMix(env: Record<string, string>): Footprint {
  const dir = tempDir('mpp-footprint-');
  const profiling = env.MIMALLOC_PROF === '1';
  const dumps: Record<string, string> = profiling ? { MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'exit.heap'), MIMALLOC_PROF_DUMP_PEAK_AT_EXIT: join(dir, 'peak.heap') } : {};
  const script = join(root, 'test', 'native', 'fixtures', 'node-footprint.cjs');
  const r = runUnder(buildTestHooks(), targetNode, [script, String(EH[0]), String(EH[1])], { ...env, ...dumps }, 240_000);
  assert.equal(r.status, 0, r.stderr);
  const fileKiB = Number(r.stdout.trim().split('\n').pop());
  if (!profiling) return { fileKiB };
  const peak = readFileSync(join(dir, 'peak.heap'), 'utf8');
  const own = /^# profiler_resident: (\d+)$/m.exec(peak);
  const rounding = /^# sampled_rounding_bytes: (\d+)$/m.exec(peak);
  const head = /^heap profile:\s*\d+:\s*(\d+)/.exec(peak);
  assert.ok(own && rounding && head, 'the peak profile carries profiler_resident, sampled_rounding_bytes and its estimate');
  return { fileKiB, ownKiB: Number(own[1]) / 1024, roundingKiB: Number(rounding[1]) / 1024, livePeakKiB: Number(head[1]) / 1024 };
}

/** The added KiB and the budget, from stopped runs, profiled ones (of one kind) and the live
 * peak. Each part is the mean over its runs: node's own file pages move by ±100 KiB from run to
 * run (V8 touches its code differently each time), so one pair's difference is mostly noise, and
 * clipped at 0 it was biased up; the mean of two pairs, clipped, halves that. */
function judge(stopped: Footprint[], profiled: Footprint[], livePeakKiB: number) {
  const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;
  const file = mean(profiled.map((r) => r.fileKiB)) - mean(stopped.map((r) => r.fileKiB));
  const own = mean(profiled.map((r) => r.ownKiB!));
  const rounding = mean(profiled.map((r) => r.roundingKiB!));
  const added = Math.max(0, file) + own + rounding;
  const text = `file ${file.toFixed(0)} KiB + own ${own.toFixed(0)} KiB + rounding ${rounding.toFixed(0)} KiB against 2 % of ${(livePeakKiB / 1024).toFixed(1)} MiB`;
  return { added, budget: SHARE * livePeakKiB, text };
}

/** The live heap at its peak: the mean of the estimates of every run profiled at the default
 * interval here (four, the controls' too: they hold memory of the profiler's, not the program's).
 * One run's estimate rests on about 40 samples at 512 KiB, a relative standard error near 15 %,
 * and one low draw (15.0 MiB) put the budget below what the profiler adds; the mean of four,
 * near 8 %. Not a finer interval: its sampling slows the program enough to move the peak itself
 * (node-mix 40: 18.1-20.9 MB at 512 KiB, 20.6 and 20.7 at 64 KiB, 30.4 at 16 KiB; this fixture
 * read 22.4 MiB at 64 KiB against 15.0-19.6 at 512 KiB). */
const meanPeakKiB = (runs: Footprint[]) => runs.reduce((a, r) => a + r.livePeakKiB!, 0) / runs.length;

/** The arm64 pass: the official arm64 Node keeps its .eh_frame in its executable (R E) segment,
 * whose pages unwind.c givable_range never hands back, so the walks leave ~3.7 MiB of it
 * resident (20 % of node-mix's live peak): a defect of the library on arm64, not of qemu. The
 * test runs and reports; it does not fail the pass until that is fixed. */
const ARM64_TABLES_KEPT =
  "arm64: node's unwind tables sit in its executable segment, whose pages the library never hands back (unwind.c givable_range): ~3.7 MiB kept";

test(`profiling node-mix adds at most 2 % of its live heap at the peak; both controls add more (${mimallocLabel})`, { skip: onMusl && MUSL_NO_NODE, todo: onCross && ARM64_TABLES_KEPT }, (t) => {
  const stopped = [nodeMix({}), nodeMix({})];
  const profiled = [nodeMix({ MIMALLOC_PROF: '1' }), nodeMix({ MIMALLOC_PROF: '1' })];
  const ballastRun = nodeMix({ MIMALLOC_PROF: '1', MP_TEST_BALLAST: '1' });
  const keptRun = nodeMix({ MIMALLOC_PROF: '1', MP_TEST_UNWIND_KEEP_PAGES: '1' });
  const runs = [...profiled, ballastRun, keptRun];
  const peak = meanPeakKiB(runs);
  t.diagnostic(`live peak: ${(peak / 1024).toFixed(1)} MiB, the mean of ${runs.map((r) => (r.livePeakKiB! / 1024).toFixed(1)).join(', ')}; file pages stopped ${stopped.map((r) => r.fileKiB).join(', ')} KiB, profiled ${profiled.map((r) => r.fileKiB).join(', ')} KiB`);
  const ours = judge(stopped, profiled, peak);
  t.diagnostic(`profiling: ${ours.text}`);
  assert.ok(ours.added <= ours.budget, `profiling adds ${ours.added.toFixed(0)} KiB: ${ours.text}`);

  const ballast = judge(stopped, [ballastRun], peak);
  t.diagnostic(`control, 1 MiB held: ${ballast.text}`);
  assert.ok(ballast.added > ballast.budget, `the anonymous control passed: ${ballast.text}`);
  const kept = judge(stopped, [keptRun], peak);
  t.diagnostic(`control, the tables' pages kept: ${kept.text}`);
  assert.ok(kept.added > kept.budget, `the file control passed: ${kept.text}`);
});

/** Misses parsed and madvise calls that handed the unwind tables' pages back, in one run of
 * node-mix 40 under the test-hooks library (MP_TEST_UNWIND_COUNTS prints them at exit). */
function giveCalls(env: Record<string, string>): { parsed: number; calls: number } {
  const script = join(root, 'bench', 'fixtures', 'node-mix.cjs');
  const r = runUnder(buildTestHooks(), targetNode, [script, '40'], { MIMALLOC_PROF: '1', MP_TEST_UNWIND_COUNTS: '1', ...env }, 240_000);
  assert.equal(r.status, 0, r.stderr);
  const m = /rules_parsed=(\d+) .*give_calls=(\d+)/.exec(r.stderr);
  assert.ok(m, `no unwind counts in ${r.stderr.slice(-400)}`);
  return { parsed: Number(m[1]), calls: Number(m[2]) };
}

/** Each madvise flushes the TLB of every CPU running the process (bench/README.md, "Per-thread
 * CPU"), so the pages of a burst of misses go back together (native/src/unwind.c): per miss
 * parsed, at most 3/4 of the calls that handing back each walk's pages at its end makes
 * (measured: about a third, 0.064 against 0.207 calls a miss, with 8 windows pending). The control runs both sides
 * with each walk's pages handed back at its end (MP_TEST_UNWIND_GIVE_EACH), and must fail. */
const BURST_SHARE = 0.75;
test(`the unwind tables' pages go back a burst at a time; the control, each walk's at its end, does not (${mimallocLabel})`, { skip: (onMusl && MUSL_NO_NODE) || (onCross && ARM64_TABLES_KEPT) }, (t) => {
  const perMiss = (c: { parsed: number; calls: number }) => c.calls / c.parsed;
  const each = giveCalls({ MP_TEST_UNWIND_GIVE_EACH: '1' });
  const burst = giveCalls({});
  const control = giveCalls({ MP_TEST_UNWIND_GIVE_EACH: '1' });
  t.diagnostic(`calls a miss: bursts ${perMiss(burst).toFixed(3)} (${burst.calls} for ${burst.parsed}); each walk ${perMiss(each).toFixed(3)} (${each.calls} for ${each.parsed}); the control ${perMiss(control).toFixed(3)}`);
  assert.ok(each.calls > 20 && burst.calls > 0, 'the runs handed pages back');
  assert.ok(perMiss(burst) <= BURST_SHARE * perMiss(each), 'bursts take fewer calls');
  assert.ok(perMiss(control) > BURST_SHARE * perMiss(each), 'the control passed');
});
