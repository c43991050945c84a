/**
 * Memory allocated on libuv's thread pool charged to the JavaScript that queued the work
 * (native/src/pool.c): each sample taken while a pool thread runs queued work, or inside that
 * work's completion, carries the queuing stack above a "[queued by]" frame.
 *
 * The figures are shares of bytes, not estimates: a sample either carries the function or
 * not, whatever its weight. With the watch working every sample of the work carries it
 * (measured: 100 %); the acceptance bounds (90 %, 80 %) leave room for work the library
 * cannot see. Each test's positive control is the same program with the watch off
 * (MIMALLOC_PPROF_POOL=0): the share falls to what the pool thread's own frames can tell,
 * nothing at all.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

import { libraryPath } from '../../src/preload/library.js';
import { root, tempDir } from '../helpers.js';
import { decode, type DecodedSample } from './decode.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const fixtures = join(root, 'test', 'run', 'fixtures');
const QUEUED_BY = '[queued by]';

function runProfile(fixture: string, interval: string, env: Record<string, string> = {}) {
  const out = join(tempDir('mpp-pool-'), 'pool.pb.gz');
  const r = spawnSync(process.execPath, [cli, 'run', '--interval', interval, '--top', '0', '--out', out, '--', 'node', join(fixtures, fixture)], {
    encoding: 'utf8',
    cwd: root, // sharp resolves from the project's node_modules
    env: { ...process.env, ...env },
    timeout: 240_000,
  });
  assert.equal(r.status, 0, r.stderr);
  return decode(out).samples;
}

/** The part of a sample's stack that ran on its own thread (below the first marker). */
const own = (s: DecodedSample) => (s.names.includes(QUEUED_BY) ? s.names.slice(0, s.names.indexOf(QUEUED_BY)) : s.names);
const queuedBy = (s: DecodedSample, fn: string) => s.names.indexOf(fn) > s.names.indexOf(QUEUED_BY) && s.names.includes(QUEUED_BY);

/** Share of `value` over the selected samples whose stack holds fn above the marker. */
function share(samples: DecodedSample[], select: (s: DecodedSample) => boolean, fn: string, value: (s: DecodedSample) => number) {
  const chosen = samples.filter(select);
  const total = chosen.reduce((a, s) => a + value(s), 0);
  const under = chosen.filter((s) => queuedBy(s, fn)).reduce((a, s) => a + value(s), 0);
  return { total, under, share: total > 0 ? under / total : 0, samples: chosen.length };
}

const mib = (b: number) => `${(b / 1048576).toFixed(1)} MiB`;
const zlibState = (s: DecodedSample) => own(s).some((n) => n.includes('AllocForZlib'));

describe('deflate streams opened by one function (zlib state allocated on a pool thread at the first write)', () => {
  test('>= 90 % of AllocForZlib in use is under openStreams, on pool threads; the control has none', (t) => {
    const on = runProfile('pool-zlib.cjs', '32k');
    const r = share(on, zlibState, 'openStreams', (s) => s.inuse);
    t.diagnostic(`AllocForZlib ${mib(r.total)} in ${r.samples} samples, ${(r.share * 100).toFixed(1)} % under openStreams`);
    assert.ok(r.total > 40 * 1048576, `${mib(r.total)} of zlib state (300 streams of ~270 KiB)`);
    assert.ok(r.share >= 0.9, `${(r.share * 100).toFixed(1)} %`);
    for (const s of on.filter(zlibState)) assert.equal(s.thread, 'libuv threadpool', own(s).join(' < '));

    const off = share(runProfile('pool-zlib.cjs', '32k', { MIMALLOC_PPROF_POOL: '0' }), zlibState, 'openStreams', (s) => s.inuse);
    t.diagnostic(`control (MIMALLOC_PPROF_POOL=0): ${(off.share * 100).toFixed(1)} % of ${mib(off.total)}`);
    assert.ok(off.total > 40 * 1048576 && off.share < 0.1, `control: ${(off.share * 100).toFixed(1)} % of ${mib(off.total)}`);
  });

  test('work queued from a worker_threads thread is charged to that thread\'s function', (t) => {
    const samples = runProfile('pool-zlib.cjs', '32k', { WHERE: 'worker', STREAMS: '100' });
    const r = share(samples, zlibState, 'openStreams', (s) => s.inuse);
    t.diagnostic(`AllocForZlib ${mib(r.total)}, ${(r.share * 100).toFixed(1)} % under the worker's openStreams`);
    assert.ok(r.total > 10 * 1048576 && r.share >= 0.9, `${(r.share * 100).toFixed(1)} % of ${mib(r.total)}`);
    const worker = samples.filter((s) => queuedBy(s, 'openStreams')).map((s) => s.names.slice(s.names.indexOf(QUEUED_BY)));
    assert.ok(worker.every((names) => !names.includes('node::NodeMainInstance::Run()')), 'the queuing stack is the worker thread\'s, not the main thread\'s');
  });
});

describe('chains of work queued from completions', () => {
  // 300 writes to one deflate stream, each queued from the previous write's completion: the
  // output Buffers are made in those completions. A chain keeps one part per native path.
  const markers = (s: DecodedSample) => s.names.filter((n) => n === QUEUED_BY).length;
  test('stay short (at most 3 markers) and keep the first caller; the control (every hop appended) grows', (t) => {
    const samples = runProfile('pool-stream.cjs', '4k').filter((s) => markers(s) > 0);
    const r = share(samples, () => true, 'streamChunks', (s) => s.inuse);
    const most = Math.max(...samples.map(markers));
    t.diagnostic(`${samples.length} samples with a queuing stack, at most ${most} markers, ${(r.share * 100).toFixed(1)} % of ${mib(r.total)} under streamChunks`);
    assert.ok(samples.length > 0 && most <= 3 && r.share >= 0.9, `${most} markers, ${(r.share * 100).toFixed(1)} %`);
    const hooks = join(root, 'build', 'test-hooks', 'libmimalloc-pprof.so');
    const control = runProfile('pool-stream.cjs', '4k', { MIMALLOC_PPROF_LIB: hooks, MP_TEST_POOL_NO_COLLAPSE: '1' });
    const grown = Math.max(...control.map(markers));
    t.diagnostic(`control: at most ${grown} markers`);
    assert.ok(grown >= 4, `control: ${grown} markers`);
  });
});

describe('Node-API async work: sharp (libvips) resizing from one async function', () => {
  test('>= 80 % of the run\'s in-use bytes are under resizeAndKeep', (t) => {
    const samples = runProfile('pool-sharp.mjs', '512k');
    const r = share(samples, () => true, 'resizeAndKeep', (s) => s.inuse);
    t.diagnostic(`${mib(r.under)} of ${mib(r.total)} in use under resizeAndKeep (${(r.share * 100).toFixed(1)} %)`);
    assert.ok(r.share >= 0.8, `${(r.share * 100).toFixed(1)} %`);
    const off = share(runProfile('pool-sharp.mjs', '512k', { MIMALLOC_PPROF_POOL: '0' }), () => true, 'resizeAndKeep', (s) => s.inuse);
    t.diagnostic(`control: ${(off.share * 100).toFixed(1)} %`);
    assert.ok(off.share < 0.1, `control: ${(off.share * 100).toFixed(1)} %`);
  });
});

describe('crypto, fs and dns work from named functions, profiled in-process (allocated bytes)', () => {
  // 24 MiB: a file read in one block, sampled with p = 1 - exp(-48) (a sample-arena limit of
  // mimalloc 3 once dropped blocks of 32 MiB or more; they now live in the program's heap)
  const FILE_BYTES = 24 << 20;
  const profile = (env: Record<string, string>) => {
    const dir = tempDir('mpp-pool-api-');
    const big = join(dir, 'big.bin');
    writeFileSync(big, Buffer.alloc(FILE_BYTES, 7));
    const out = join(dir, 'api.pb.gz');
    const r = spawnSync(process.execPath, ['--perf-basic-prof', '--interpreted-frames-native-stack', join(root, 'test', 'node', 'api-fixtures', 'pool-async.mjs'), big, out], {
      encoding: 'utf8',
      env: { ...process.env, LD_PRELOAD: libraryPath(), MIMALLOC_PROF: '1', MPP_INDEX: pathToFileURL(join(root, 'dist', 'src', 'index.js')).href, ...env },
      timeout: 120_000,
    });
    assert.equal(r.status, 0, r.stderr);
    const { fileBytes } = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as { fileBytes: number };
    assert.equal(fileBytes, FILE_BYTES);
    return decode(out).samples;
  };
  const pool = (re: RegExp) => (s: DecodedSample) => s.thread === 'libuv threadpool' && own(s).some((n) => re.test(n));
  const fileBuffer = (s: DecodedSample) => s.size === FILE_BYTES;

  test('pbkdf2 under hashPasswords, getaddrinfo under lookupMany, readFile\'s buffer under loadBigFile: >= 80 % each', (t) => {
    const samples = profile({});
    const checks = [
      ['pbkdf2 on the pool', share(samples, pool(/pbkdf2/i), 'hashPasswords', (s) => s.alloc)],
      ['getaddrinfo on the pool', share(samples, pool(/getaddrinfo/), 'lookupMany', (s) => s.alloc)],
      // fs.readFile allocates nothing on the pool (it reads into a Buffer made in its
      // completion on the main thread): that Buffer is what it costs, charged the same way
      ['readFile\'s 24 MiB buffer (completion)', share(samples, fileBuffer, 'loadBigFile', (s) => s.alloc)],
      ['fs work on the pool', share(samples, pool(/uv__fs_work/), 'loadBigFile', (s) => s.alloc)],
    ] as const;
    for (const [what, r] of checks) t.diagnostic(`${what}: ${mib(r.total)} allocated in ${r.samples} samples, ${(r.share * 100).toFixed(1)} % under its function`);
    for (const [what, r] of checks.slice(0, 3)) assert.ok(r.total > 0 && r.share >= 0.8, `${what}: ${(r.share * 100).toFixed(1)} % of ${mib(r.total)}`);
    // loadBigFile runs after `await`ing hashPasswords, resumed inside a pbkdf2 completion's
    // microtask checkpoint: the file is not charged to hashPasswords (the symbolizer's cut)
    const wrongly = share(samples, fileBuffer, 'hashPasswords', (s) => s.alloc);
    assert.equal(wrongly.under, 0, `readFile's buffer under hashPasswords: ${mib(wrongly.under)}`);
    const fsPool = checks[3][1];
    assert.ok(fsPool.total === 0 || fsPool.share >= 0.8, `fs on the pool: ${(fsPool.share * 100).toFixed(1)} %`);

    const off = profile({ MIMALLOC_PPROF_POOL: '0' });
    const controls = [share(off, pool(/pbkdf2/i), 'hashPasswords', (s) => s.alloc), share(off, fileBuffer, 'loadBigFile', (s) => s.alloc)];
    t.diagnostic(`control: ${controls.map((r) => `${(r.share * 100).toFixed(1)} %`).join(', ')}`);
    for (const r of controls) assert.ok(r.total > 0 && r.share < 0.1, `control: ${(r.share * 100).toFixed(1)} %`);
  });
});

describe('the watch never harms the program', () => {
  test('20 000 fs.stat in flight (over the table), zlib round trips, crypto and dns while the profiler restarts every 3 ms', (t) => {
    for (const lib of [libraryPath(), join(root, 'build', 'debug', 'libmimalloc-pprof.so')]) {
      const r = spawnSync(process.execPath, [join(fixtures, 'pool-churn.cjs')], {
        encoding: 'utf8',
        env: { ...process.env, LD_PRELOAD: lib, MIMALLOC_PROF: '1', UV_THREADPOOL_SIZE: '2', MPP_INDEX: pathToFileURL(join(root, 'dist', 'src', 'index.js')).href },
        timeout: 120_000,
      });
      assert.equal(r.status, 0, r.stderr);
      const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as Record<string, unknown>;
      t.diagnostic(`${lib.includes('debug') ? 'debug build' : 'library'}: ${JSON.stringify(out)}`);
      assert.deepEqual(
        { statted: out.statted, same: out.same, keys: out.keys, found: out.found, watched: out.watchedBefore },
        { statted: 20000, same: 400, keys: 50, found: 100, watched: true },
      );
      assert.ok((out.poolUncharged as number) > 0, 'the table filled up (items left uncharged, not lost)');
    }
  });
});
