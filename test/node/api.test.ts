/**
 * The in-process API end to end, in a child process: under the preload every call works
 * (profiles, stats, exact counters, dumps with rotation, a signal, the environment); without
 * it `available()` says why, every other call fails with NotPreloadedError (synchronous calls
 * throw it, asynchronous ones reject with it), the HTTP handler answers 503, and the process
 * keeps running. Each run is the other's positive control.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { libraryPath } from '../../src/preload/library.js';
import { root, tempDir } from '../helpers.js';

const fixture = join(root, 'test', 'node', 'api-fixtures', 'calls.mjs');
const auto = join(root, 'dist', 'src', 'node', 'auto.js');

interface Outcome {
  kind: 'returned' | 'resolved' | 'threw' | 'rejected';
  value?: unknown;
  error?: { class: string; code: string; notPreloaded: boolean; message: string };
}

type Results = Record<string, any>;

function runCalls(preload: boolean): { status: number | null; stderr: string; r: Results } {
  const cwd = tempDir('mpp-api-run-');
  const envDir = join(cwd, 'env-dumps');
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS' && k !== 'LD_PRELOAD'));
  const p = spawnSync(process.execPath, ['--perf-basic-prof', '--interpreted-frames-native-stack', `--import=${auto}`, fixture], {
    cwd,
    encoding: 'utf8',
    timeout: 60_000,
    env: {
      ...clean,
      ...(preload ? { LD_PRELOAD: libraryPath(), MIMALLOC_PROF: '1' } : {}),
      MIMALLOC_PPROF_DUMP_DIR: envDir,
      MIMALLOC_PPROF_DUMP_INTERVAL: '1',
      MIMALLOC_PPROF_DUMP_KEEP: '1',
    },
  });
  const last = p.stdout.trim().split('\n').pop() ?? '';
  if (p.pid) rmSync(`/tmp/perf-${p.pid}.map`, { force: true });
  rmSync(cwd, { recursive: true, force: true });
  assert.ok(last.startsWith('{'), `no result (status ${p.status}, signal ${p.signal}):\n${p.stdout}\n${p.stderr}`);
  return { status: p.status, stderr: p.stderr, r: JSON.parse(last) };
}

const SYNC = ['isRunning', 'start', 'stats', 'memoryEvents.before', 'memoryEvents.enable', 'memoryEvents.snapshot', 'memoryEvents.disable', 'reset', 'startDumps', 'stop', 'isRunningAfterStop', 'startSeeded'];
const ASYNC = ['profile', 'profile.text', 'profile.allocs', 'writeProfile'];

test('without the preload: available() says why, every call fails with NotPreloadedError but pushTo, the process runs on', () => {
  const { status, stderr, r } = runCalls(false);
  assert.equal(status, 0, stderr);
  assert.deepEqual(r.available, {
    available: false,
    reason: 'not preloaded: start the process with LD_PRELOAD=$(npx mimalloc-pprof lib)',
    code: 'MPP_ERR_NOT_PRELOADED',
  });
  for (const name of [...SYNC, ...ASYNC]) {
    const o = r[name] as Outcome;
    assert.equal(o.kind, SYNC.includes(name) ? 'threw' : 'rejected', `${name}: ${JSON.stringify(o)}`);
    assert.equal(o.error?.class, 'NotPreloadedError', name);
    assert.equal(o.error?.code, 'MPP_ERR_NOT_PRELOADED', name);
    assert.ok(o.error?.notPreloaded, `${name}: instanceof NotPreloadedError`);
    assert.match(o.error!.message, /not available in this process: not preloaded/);
  }
  // pushTo returns a pusher that does nothing and says why (a push must never stop the app)
  assert.equal(r.pushTo!.kind, 'returned', JSON.stringify(r.pushTo));
  const push = (r.pushTo!.value as { stats: { available: boolean; reason: string } }).stats;
  assert.equal(push.available, false);
  assert.match(push.reason, /not available in this process: not preloaded/);
  // argument errors still come first, as TypeError
  assert.equal(r.badStart!.error?.class, 'TypeError');
  assert.equal(r.badProfile!.kind, 'rejected');
  assert.equal(r.badProfile!.error?.class, 'TypeError');
  assert.deepEqual(r.http, {
    status: 503,
    goPprof: '1',
    body: 'mimalloc-pprof: the profiler is not available in this process: not preloaded: start the process with LD_PRELOAD=$(npx mimalloc-pprof lib)\n',
  });
  // auto.js said once why it did not start the dumps, and the application went on
  assert.equal(stderr.split('\n').filter((l) => l.startsWith('mimalloc-pprof: dumps not started:')).length, 1, stderr);
  assert.equal(r.alive, true);
});

test('under the preload (the positive control): every call works', () => {
  const { status, stderr, r } = runCalls(true);
  assert.equal(status, 0, stderr);
  assert.equal((r.available as { available: boolean }).available, true);
  for (const name of [...SYNC, 'pushTo', ...ASYNC]) {
    const o = r[name] as Outcome;
    assert.equal(o.kind, SYNC.includes(name) || name === 'pushTo' ? 'returned' : 'resolved', `${name}: ${JSON.stringify(o)}`);
  }
  assert.equal((r.pushTo!.value as { stats: { available: boolean } }).stats.available, true);
  assert.equal(r.isRunning!.value, true);
  assert.equal(r.start!.value, false, 'already running (MIMALLOC_PROF=1): start says so');
  const stats = r.stats!.value as Record<string, number | boolean>;
  assert.equal(stats.running, true);
  assert.equal(stats.sampleInterval, 524288);
  assert.ok((stats.liveSamples as number) > 0 && (stats.rssBytes as number) > 0 && (stats.commitBytes as number) > 0);
  assert.equal(r['memoryEvents.enable']!.value, true);
  const exact = r['memoryEvents.snapshot']!.value as { enabled: boolean; liveBytes: number; accumBytes: number; accumObjects: number };
  assert.equal(exact.enabled, true);
  // 8 MiB in 64 KiB buffers while counting (control: nothing was counted before)
  assert.ok(exact.accumBytes >= 2 << 20 && exact.accumObjects > 0 && exact.liveBytes > 0, JSON.stringify(exact));
  assert.deepEqual(r['memoryEvents.before']!.value, { enabled: false, liveBytes: 0, accumBytes: 0, liveCount: 0, accumCount: 0, liveObjects: 0, accumObjects: 0 });
  assert.equal(r['memoryEvents.disable']!.value, false);
  assert.deepEqual(r.profileFacts, { gzip: true, samples: (r.profileFacts as { samples: number }).samples, hasFunction: true, textHead: 'heap profile:', allocsDefault: 'alloc_space', allocsGzip: false });
  assert.ok((r.profileFacts as { samples: number }).samples > 0);
  assert.equal(r.sharedDumps, 1, 'three concurrent profile() calls share one dump');
  assert.equal(r.sequentialDumps, 2, 'control: calls one after another take a dump each');
  assert.equal(r.writeMode, '600');
  assert.ok((r.accumAfterReset as number) < 4 << 20, `cumulative figures after reset: ${String(r.accumAfterReset)}`);
  assert.equal(r.badStart!.error?.class, 'TypeError');
  assert.equal(r.badProfile!.error?.class, 'TypeError');
  assert.equal(r.sigusr1!.error?.class, 'TypeError');
  assert.match(r.sigusr1!.error!.message, /inspector/);
  const rotation = r.rotation as { written: number; kept: string[]; newest: string[] };
  assert.equal(rotation.written, 4);
  assert.deepEqual(rotation.kept, rotation.newest, 'the two newest of four dumps are kept');
  assert.equal(r.signalDumped, true, 'SIGUSR2 wrote a dump');
  assert.equal(r.afterSignal, 2);
  assert.equal(r.envDumps, 1, 'MIMALLOC_PPROF_DUMP_* (via --import auto.js): periodic dumps, keep 1');
  assert.equal(r.badEnv!.error?.class, 'TypeError');
  assert.match(r.badEnv!.error!.message, /MIMALLOC_PPROF_DUMP_KEEP/);
  assert.deepEqual(r.http, { status: 200, goPprof: null, body: '' });
  assert.equal(r.isRunningAfterStop!.value, false);
  assert.equal(r.startSeeded!.value, true);
  assert.equal(r.intervalAfterRestart, 65536);
  assert.equal(r.alive, true);
  assert.ok(!existsSync(join(root, 'isolate.log')));
});
