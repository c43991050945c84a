/**
 * growth's rankings and series (issue 29, items 1 and 5) on simulated sampled series:
 *  - a JavaScript function leaking 1 MiB/s under an allocator frame and thirty root frames
 *    (`_start`, `uv_run`, `[libc.so.6]`, `node::Start`, `Builtins_JSEntry`…), next to a steady
 *    cache under the same roots and a steady reader that shares the allocator: the leak is in
 *    the first three rows of "where memory grows" (chains) and of the own-memory (flat)
 *    ranking, its slope's interval covers the truth (20 seeds), and no root frame is among
 *    the first rows. Control: the cumulative ranking (what growth ranked by before) puts the
 *    root frames first and fails the same check;
 *  - two JavaScript functions of one name in two files are two rows (control: the same
 *    profiles without JavaScript frames, keyed by name alone, merge them and fail);
 *  - profiles of two processes are fitted apart, each at its own rate; a pid reused (the
 *    recorded peak RSS falls) is a new process (control: without recorded pids one fit
 *    through both is wrong);
 *  - run's exit profile (taken after a full collection) is listed, not fitted, unless asked
 *    (control: the same profile without run's comment is taken as periodic and fitted).
 * The sampling model is test/profile/growth.test.ts's: each block of size s is sampled with
 * probability q = 1 − e^(−s/R) and weighted 1/q while it lives.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { growth, growthSeries, type GrowthRow } from '../../src/profile/growth.js';
import type { Profile } from '../../src/profile/model.js';
import { HEAP_TYPES, makeProfile, rng } from './util.js';

const R = 512 * 1024;
const BLOCK = 64 * 1024;
const MiB = 1 << 20;

/** Frames written `JS:name file:line` become JavaScript functions as run names them (perf map). */
function jsify(p: Profile): Profile {
  const st = p.stringTable;
  for (const f of p.function) {
    const raw = st.strings[Number(f.name)]!;
    const m = /^JS:(\S+) (\S+):(\d+)$/.exec(raw);
    if (!m) continue;
    f.name = st.dedup(m[1]!);
    f.systemName = st.dedup(`JS:*${m[1]} ${m[2]}:${m[3]}:1`);
    f.filename = st.dedup(m[2]!);
    f.startLine = Number(m[3]);
  }
  return p;
}

const ROOTS = [
  'JS:emit node:events:517',
  'JS:parserOnIncoming node:_http_server:1100',
  'Builtins_InterpreterEntryTrampoline',
  'Builtins_JSEntryTrampoline',
  'Builtins_JSEntry',
  'v8::internal::(anonymous namespace)::Invoke',
  'v8::internal::Execution::Call',
  'v8::Function::Call',
  'node::InternalCallbackScope::Close',
  'node::InternalMakeCallback',
  'node::AsyncWrap::MakeCallback',
  'node::StreamBase::CallJSOnreadMethod',
  'node::EmitToJSStreamListener::OnStreamRead',
  'node::LibuvStreamWrap::OnUvRead',
  'uv__read',
  'uv__stream_io',
  'uv__io_poll',
  'uv_run',
  'node::SpinEventLoop',
  'node::NodeMainInstance::Run',
  'node::LoadSnapshotDataAndRun',
  'node::Start',
  '__libc_start_call_main',
  '[libc.so.6]',
  '__libc_start_main',
  '_start',
];
const LEAK = 'JS:rememberRequest /srv/app/server.mjs:9';
const ALLOCATOR = 'node::NodeArrayBufferAllocator::Allocate';
/** The root frames as growth keys them (`name file:line` for the JavaScript ones). */
const ROOT_KEYS = new Set(ROOTS.map((r) => r.replace(/^JS:/, '')));

/** The value rows of `live` sampled blocks of `size` (`allocated` sampled so far). */
const q = (size: number) => -Math.expm1(-size / R);
const row = (allocated: number, live: number, size: number) => [allocated / q(size), (allocated * size) / q(size), live / q(size), (live * size) / q(size)];

/**
 * Nine profiles a second apart of a process where rememberRequest keeps one 1 MiB Buffer more
 * each second (allocated through ALLOCATOR), refillCache holds 16 MiB in 64 KiB blocks and
 * replaces 50 a second, and readBody holds 8 MiB through ALLOCATOR and replaces 30 a second.
 */
function leakSeries(seed: number, comments: (t: number) => string[] = () => []) {
  const random = rng(seed);
  const sampled = (size: number) => random() < q(size);
  let leak = 0;
  const cache = Array.from({ length: 256 }, () => sampled(BLOCK));
  let cacheAllocated = cache.filter(Boolean).length;
  const body = Array.from({ length: 128 }, () => sampled(BLOCK));
  let bodyAllocated = body.filter(Boolean).length;
  const out = [];
  for (let t = 0; t <= 8; t++) {
    if (t > 0) {
      if (sampled(MiB)) leak++;
      for (let i = 0; i < 50; i++) {
        const hit = sampled(BLOCK);
        cache[Math.floor(random() * 256)] = hit;
        if (hit) cacheAllocated++;
      }
      for (let i = 0; i < 30; i++) {
        const hit = sampled(BLOCK);
        body[Math.floor(random() * 128)] = hit;
        if (hit) bodyAllocated++;
      }
    }
    const p = jsify(
      makeProfile({
        types: HEAP_TYPES,
        period: R,
        samples: [
          ...(leak > 0 ? [{ stack: [ALLOCATOR, 'v8::internal::BackingStore::Allocate', 'Builtins_ArrayBufferConstructor', 'JS:alloc node:buffer:389', LEAK, 'JS:(anonymous) /srv/app/server.mjs:15', ...ROOTS], values: row(leak, leak, MiB) }] : []),
          { stack: ['operator new', 'JS:refillCache /srv/app/cache.mjs:3', ...ROOTS], values: row(cacheAllocated, cache.filter(Boolean).length, BLOCK) },
          { stack: [ALLOCATOR, 'v8::internal::BackingStore::Allocate', 'JS:readBody /srv/app/server.mjs:30', ...ROOTS], values: row(bodyAllocated, body.filter(Boolean).length, BLOCK) },
        ],
        comments: comments(t),
      }),
    );
    p.timeNanos = BigInt(1_700_000_000 + t) * 1_000_000_000n;
    out.push({ profile: p, name: `t${t}` });
  }
  return out;
}

const LEAK_KEY = 'rememberRequest /srv/app/server.mjs:9';
/** The leaking function is named by the row (as its function or among the callers carrying its slope). */
const namesLeak = (r: GrowthRow & { via?: string[] }) => r.name === LEAK_KEY || (r.via ?? []).includes(LEAK_KEY);

test('a leak under thirty root frames: first three rows of where memory grows, slope within its interval (20 seeds); the cumulative ranking fails the same check', () => {
  let covered = 0;
  let cumulativeFirst = 0;
  let cumulativeRoots = 0;
  for (let seed = 1; seed <= 20; seed++) {
    const g = growth(leakSeries(seed));
    const top3 = g.chains.slice(0, 3);
    const row = top3.find(namesLeak);
    assert.ok(row, `seed ${seed}: the leak is not in the first 3 chains: ${JSON.stringify(top3.map((r) => [r.name, r.via.slice(0, 6)]))}`);
    assert.equal(row.programFunction, LEAK_KEY);
    assert.ok(row.significant, `seed ${seed}: ${JSON.stringify(row)}`);
    assert.equal(row.name, ALLOCATOR, 'the chain is named by its deepest function');
    assert.ok(row.via.includes('_start') && row.via.indexOf(LEAK_KEY) < row.via.indexOf('_start'), 'the callers with the same slope, innermost first');
    if (row.low <= MiB && MiB <= row.high) covered++;
    // the steady reader shares the allocator: it is not folded into the leak's row
    assert.ok(!row.via.includes('readBody /srv/app/server.mjs:30'));
    for (const r of [...top3, ...g.flat.slice(0, 3)]) assert.ok(!ROOT_KEYS.has(r.name), `seed ${seed}: root frame ${r.name} in the first rows`);
    assert.ok(g.flat.slice(0, 3).some((r) => r.name === ALLOCATOR), 'own memory: the allocator in the first rows');
    // the control: the cumulative ranking (growth's ranking before issue 29) fails the check
    if (g.functions.slice(0, 3).some(namesLeak)) cumulativeFirst++;
    if (g.functions.slice(0, 3).every((r) => ROOT_KEYS.has(r.name))) cumulativeRoots++;
  }
  console.log(`# 20 seeds: the leak's true slope inside its chain's interval ${covered} times; the cumulative ranking had it in its first 3 rows ${cumulativeFirst} times and opened on 3 root frames ${cumulativeRoots} times`);
  assert.ok(covered >= 17, `the true slope was inside the interval ${covered} times of 20`);
  assert.equal(cumulativeFirst, 0, 'control: the cumulative ranking should bury the leak under root frames');
});

/**
 * One leak reached by two native paths that differ in more than their nearest JavaScript frame
 * (V8 inlined createUnsafeBuffer into alloc on its optimised path): 1 MiB/s each way, which
 * meet at alloc and rememberRequest. `joined` false gives the optimised path functions of its
 * own above the allocator (another alloc, a rememberRequest in another file): nothing joins
 * the two paths, as for two leaks.
 */
function splitLeakSeries(seed: number, joined = true) {
  const random = rng(seed);
  const sampled = (size: number) => random() < q(size);
  let viaApi = 0;
  let inlined = 0;
  const out = [];
  for (let t = 0; t <= 8; t++) {
    if (t > 0) {
      if (sampled(MiB)) viaApi++;
      if (sampled(MiB)) inlined++;
    }
    const tail = [LEAK, 'JS:(anonymous) /srv/app/server.mjs:15', ...ROOTS];
    const otherTail = ['JS:rememberRequest /srv/app/other.mjs:9', 'JS:(anonymous) /srv/app/other.mjs:15', ...ROOTS];
    const p = jsify(
      makeProfile({
        types: HEAP_TYPES,
        period: R,
        samples: [
          ...(viaApi > 0 ? [{ stack: [ALLOCATOR, 'node::Buffer::CreateUnsafeArrayBuffer', 'Builtins_CallApiCallback', 'JS:createUnsafeBuffer node:internal/buffer:1056', 'JS:alloc node:buffer:389', ...tail], values: row(viaApi, viaApi, MiB) }] : []),
          ...(inlined > 0 ? [{ stack: [ALLOCATOR, 'v8::internal::BackingStore::Allocate', 'Builtins_ArrayBufferConstructor', ...(joined ? ['JS:alloc node:buffer:389', ...tail] : ['JS:allocOther node:buffer:400', ...otherTail])], values: row(inlined, inlined, MiB) }] : []),
          { stack: ['operator new', 'JS:refillCache /srv/app/cache.mjs:3', ...ROOTS], values: row(10, 10, BLOCK) },
        ],
      }),
    );
    p.timeNanos = BigInt(1_700_000_000 + t) * 1_000_000_000n;
    out.push({ profile: p, name: `t${t}` });
  }
  return out;
}

test('one leak reached by two paths that differ beyond their nearest JavaScript frame is one row at its whole rate (20 seeds); control: paths that share no function above split it', () => {
  let covered = 0;
  for (let seed = 1; seed <= 20; seed++) {
    const g = growth(splitLeakSeries(seed));
    const rows = g.chains.filter(namesLeak);
    assert.equal(rows.length, 1, `seed ${seed}: ${JSON.stringify(g.chains.map((r) => [r.name, r.bytesPerSecond, r.via.slice(0, 6)]))}`);
    assert.ok(g.chains.slice(0, 3).includes(rows[0]!));
    if (rows[0]!.low <= 2 * MiB && 2 * MiB <= rows[0]!.high) covered++;
  }
  assert.ok(covered >= 17, `the whole rate was inside the interval ${covered} times of 20`);
  // control: where nothing joins the two paths, the same count finds two rows
  const split = growth(splitLeakSeries(1, false)).chains.filter((r) => (r.via ?? []).some((v) => v.startsWith('rememberRequest ')));
  assert.equal(split.length, 2, `control: ${JSON.stringify(split.map((r) => [r.name, r.bytesPerSecond]))}`);
});

test('the chain interval is the one growth computes for the same samples (the math is shared, not re-derived)', () => {
  const g = growth(leakSeries(3));
  const chain = g.chains.find(namesLeak)!;
  const fn = g.functions.find((f) => f.name === LEAK_KEY)!;
  // the leak's chain holds exactly the samples beneath rememberRequest: same figures, same fit
  assert.deepEqual(chain.series, fn.series);
  assert.equal(chain.bytesPerSecond, fn.bytesPerSecond);
  assert.equal(chain.low, fn.low);
  assert.equal(chain.high, fn.high);
});

test('two JavaScript functions of one name in two files are two rows; control: keyed by name alone they merge', () => {
  const build = (js: boolean) =>
    Array.from({ length: 6 }, (_, t) => {
      const name = (file: string, line: number) => (js ? `JS:handle ${file}:${line}` : 'handle');
      const p = jsify(
        makeProfile({
          types: HEAP_TYPES.slice(2),
          period: 1,
          samples: [
            { stack: ['malloc', name('/srv/a.mjs', 3), 'main'], values: [t + 1, (t + 1) * MiB] },
            { stack: ['calloc', name('/srv/b.mjs', 7), 'main'], values: [10, 10 * MiB] },
          ],
        }),
      );
      p.timeNanos = BigInt(1_700_000_000 + t) * 1_000_000_000n;
      return { profile: p, name: `t${t}` };
    });
  const check = (g: ReturnType<typeof growth>) => {
    const a = g.functions.find((f) => f.name === 'handle /srv/a.mjs:3');
    const b = g.functions.find((f) => f.name === 'handle /srv/b.mjs:7');
    assert.ok(a && b, `rows: ${g.functions.map((f) => f.name).join(', ')}`);
    assert.ok(a.significant && Math.abs(a.bytesPerSecond - MiB) < 1, JSON.stringify(a));
    assert.ok(!b.significant && b.bytesPerSecond === 0, JSON.stringify(b));
    assert.equal(a.function, 'handle');
    assert.equal(a.file, '/srv/a.mjs');
    assert.equal(a.line, 3);
    assert.equal(g.chains[0]!.name, 'malloc');
    assert.deepEqual(g.chains[0]!.via, ['handle /srv/a.mjs:3', 'main']);
  };
  check(growth(build(true)));
  assert.throws(() => check(growth(build(false))), /rows: .*handle/);
});

/** A series of `n` periodic profiles of process `pid` from `t0`, leaking `rate` bytes a second (exact figures). */
function processSeries(pid: number, rate: number, t0: number, n: number, peakRss = (t: number) => 1e8 + t, startTime?: number) {
  return Array.from({ length: n }, (_, t) => {
    const p = makeProfile({
      types: HEAP_TYPES.slice(2),
      period: 1,
      samples: [
        { stack: ['leak', 'main'], values: [t + 1, (t + 1) * rate] },
        { stack: ['steady', 'main'], values: [4, 4 * MiB] },
      ],
      comments: [
        `mimalloc-pprof interval=1 dropped_samples=0 live_samples=5 pid=${pid} peak_rss=${peakRss(t)}${startTime !== undefined ? ` start_time=${startTime}` : ''}`,
        `mimalloc-pprof 0.1.0 run --every: profile ${t + 1} of pid=${pid}`,
      ],
    });
    p.timeNanos = BigInt(Math.round((t0 + t) * 1e9));
    return { profile: p, name: `p${pid}.${t}` };
  });
}

test('profiles of two processes: one analysis each, at its own rate; growth alone refuses them, naming both; control: without recorded pids one fit goes wrong', () => {
  const a = processSeries(4242, MiB, 1_700_000_000, 6);
  const b = processSeries(4343, 4 * MiB, 1_700_000_000.5, 5);
  const mixed = [a[0]!, b[0]!, a[1]!, b[1]!, a[2]!, b[2]!, a[3]!, b[3]!, a[4]!, b[4]!, a[5]!];
  const series = growthSeries(mixed);
  assert.deepEqual(
    series.map((s) => [s.label, s.pid, s.profiles.length]),
    [
      ['pid 4242', 4242, 6],
      ['pid 4343', 4343, 5],
    ],
  );
  const leak = (i: number) => series[i]!.result!.functions.find((f) => f.name === 'leak')!;
  assert.ok(Math.abs(leak(0).bytesPerSecond - MiB) < 1, JSON.stringify(leak(0)));
  assert.ok(Math.abs(leak(1).bytesPerSecond - 4 * MiB) < 1, JSON.stringify(leak(1)));
  assert.throws(() => growth(mixed), /2 processes \(pid 4242: 6; pid 4343: 5\)/);
  // control: the same figures without pids are taken as one process, and the fit is wrong
  const anonymous = mixed.map(({ profile, name }) => {
    profile.comment = [];
    return { profile, name };
  });
  const one = growthSeries(anonymous);
  assert.equal(one.length, 1);
  const merged = one[0]!.result!.functions.find((f) => f.name === 'leak')!;
  assert.ok(Math.abs(merged.bytesPerSecond - MiB) > 0.3 * MiB && Math.abs(merged.bytesPerSecond - 4 * MiB) > 0.3 * MiB, JSON.stringify(merged));
});

test('a pid reused: the recorded peak RSS falls, so the later profiles are another process', () => {
  const first = processSeries(777, MiB, 1_700_000_000, 4, (t) => 2e8 + t);
  const second = processSeries(777, 2 * MiB, 1_700_000_010, 4, (t) => 1e8 + t);
  const series = growthSeries([...first, ...second]);
  assert.deepEqual(
    series.map((s) => s.label),
    ['pid 777', 'pid 777 (process 2 with this pid)'],
  );
  assert.ok(Math.abs(series[1]!.result!.functions.find((f) => f.name === 'leak')!.bytesPerSecond - 2 * MiB) < 1);
  // control: a peak that keeps rising is one process
  assert.equal(growthSeries([...first, ...processSeries(777, 2 * MiB, 1_700_000_010, 4, (t) => 3e8 + t)]).length, 1);
});

test('the exit profile is shown as what it is and not fitted unless asked; control: without run\'s comment it is fitted', () => {
  const periodic = processSeries(4242, MiB, 1_700_000_000, 6);
  // at exit, after a full collection: the leak is still there, 32 MiB of garbage is not
  const exitProfile = (comment: boolean) => {
    const p = makeProfile({
      types: HEAP_TYPES.slice(2),
      period: 1,
      samples: [
        { stack: ['leak', 'main'], values: [7, 7 * MiB] },
        { stack: ['steady', 'main'], values: [0, 0] },
      ],
      comments: ['mimalloc-pprof interval=1 dropped_samples=0 live_samples=5 pid=4242 peak_rss=100000010', ...(comment ? ['mimalloc-pprof 0.1.0 run: interval=1 seed=none pid=4242', 'command: node server.js'] : [])],
    });
    p.timeNanos = BigInt(1_700_000_006.5 * 1e9);
    return { profile: p, name: 'app.pb.gz' };
  };
  const [without] = growthSeries([...periodic, exitProfile(true)]);
  assert.equal(without!.command, 'node server.js');
  const exit = without!.profiles.find((p) => p.name === 'app.pb.gz')!;
  assert.deepEqual(exit, { name: 'app.pb.gz', kind: 'exit', time: 6.5, total: 7 * MiB, fitted: false });
  assert.equal(without!.result!.times.length, 6);
  const steady = (s: typeof without) => s!.result!.functions.find((f) => f.name === 'steady')!;
  assert.ok(Math.abs(steady(without).bytesPerSecond) < 1);
  const [withExit] = growthSeries([...periodic, exitProfile(true)], { includeExit: true });
  assert.equal(withExit!.result!.times.length, 7);
  assert.ok(withExit!.profiles.find((p) => p.kind === 'exit')!.fitted);
  assert.ok(steady(withExit).bytesPerSecond < -0.1 * MiB, 'fitted, the collection shows as a fall');
  // control: the same profile without run's exit comment is a periodic one, fitted
  const [control] = growthSeries([...periodic, exitProfile(false)]);
  assert.equal(control!.result!.times.length, 7);
  assert.ok(steady(control).bytesPerSecond < 0);
  // a process with one periodic profile and its exit profile: nothing to fit, and it says why
  const [lone] = growthSeries([periodic[0]!, exitProfile(true)]);
  assert.equal(lone!.result, undefined);
  assert.match(lone!.reason!, /^1 periodic profile \(and the exit profile, not fitted without --include-exit\): nothing to fit$/);
});

test('a pid reused, told by the recorded start time: two processes even where the peak RSS keeps rising; control: without start times, one', () => {
  const rising = (base: number) => (t: number) => base + t; // the second process's peak above the first's: only the start time tells
  const first = processSeries(888, MiB, 1_700_000_000, 4, rising(1e8), 1_699_999_999_000);
  const second = processSeries(888, 3 * MiB, 1_700_000_010, 4, rising(2e8), 1_700_000_009_500);
  const series = growthSeries([...first, ...second]);
  assert.equal(series.length, 2, JSON.stringify(series.map((s) => s.label)));
  assert.match(series[0]!.label, /^pid 888 \(started 1699999999000\)/);
  assert.match(series[1]!.label, /^pid 888 \(started 1700000009500\)/);
  assert.ok(Math.abs(series[0]!.result!.functions.find((f) => f.name === 'leak')!.bytesPerSecond - MiB) < 1);
  assert.ok(Math.abs(series[1]!.result!.functions.find((f) => f.name === 'leak')!.bytesPerSecond - 3 * MiB) < 1);
  // control: the same profiles without start times are one process (the peak never fell)
  const control = growthSeries([...processSeries(888, MiB, 1_700_000_000, 4, rising(1e8)), ...processSeries(888, 3 * MiB, 1_700_000_010, 4, rising(2e8))]);
  assert.equal(control.length, 1);
});
