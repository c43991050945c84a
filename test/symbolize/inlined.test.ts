/**
 * Functions the JIT inlined are named as themselves (src/symbolize/v8-log.ts): a small hot
 * function that leaks is inlined by TurboFan into its caller (checked with
 * --trace-turbo-inlining), and the profile `run` writes still names it, with file:line, its
 * memory beneath it and its caller above it, in `go tool pprof` and `mimalloc-pprof top` too.
 * Control: MIMALLOC_PPROF_TEST_NO_INLINE=1 leaves the inlined functions out, and the same
 * checks fail (the memory is its caller's). Unit tests of the log's reading beside them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { appendFileSync, closeSync, copyFileSync, openSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Label, Location } from '../../src/profile/pprof.js';

import { libraryPath } from '../../src/preload/library.js';
import { symbolize } from '../../src/symbolize/index.js';
import { parseV8Log, positionTable, type V8CodeLog, V8LogFollower } from '../../src/symbolize/v8-log.js';
import { makeProfile } from '../profile/util.js';
import { root, tempDir } from '../helpers.js';
import { decode } from '../run/decode.js';

const fixture = join(root, 'test', 'symbolize', 'fixtures', 'inlined.cjs');
const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const LEAK = 200 * 500 * 1024; // what the fixture keeps

const clean = (): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS' && k !== 'LD_PRELOAD'));

function runFixture(control: boolean): string {
  const dir = tempDir('mpp-inlined-');
  const out = join(dir, 'inlined.pb.gz');
  const r = spawnSync(process.execPath, [cli, 'run', '--no-js-heap', '--out', out, '--', process.execPath, fixture], {
    cwd: dir,
    env: { ...clean(), ...(control ? { MIMALLOC_PPROF_TEST_NO_INLINE: '1' } : {}) },
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 0, r.stderr);
  return out;
}

/** The same workload through the in-process API (fixtures/inlined-api.mjs): its worker reads V8's
 * code log as it grows (src/node/code-log.ts, V8LogFollower). Control: MIMALLOC_PPROF_V8_LOG=0. */
function apiFixture(control: boolean): string {
  const dir = tempDir('mpp-inlined-api-');
  const out = join(dir, 'inlined.pb.gz');
  const r = spawnSync(process.execPath, ['--perf-basic-prof', '--interpreted-frames-native-stack', join(root, 'test', 'symbolize', 'fixtures', 'inlined-api.mjs'), out], {
    cwd: dir,
    env: { ...clean(), LD_PRELOAD: libraryPath(), ...(control ? { MIMALLOC_PPROF_V8_LOG: '0' } : {}) },
    encoding: 'utf8',
    timeout: 60_000,
  });
  rmSync(`/tmp/perf-${r.pid}.map`, { force: true });
  assert.equal(r.status, 0, r.stderr);
  return out;
}

/** In-use bytes beneath leakSmall (named from the fixture, line 4) with caller right above it
 * in the same stack; fails unless that is most of what the fixture keeps. */
function checkInlinedNamed(out: string): number {
  const { profile, str, samples } = decode(out);
  const leak = profile.function.find((f) => str(f.name) === 'leakSmall' && str(f.filename) === fixture && Number(f.startLine) === 4);
  assert.ok(leak, 'leakSmall is a function of the profile, with its file and line');
  let beneath = 0;
  for (const s of samples) {
    const i = s.names.indexOf('leakSmall');
    if (i >= 0 && s.names[i + 1] === 'caller' && s.files[i] === fixture) beneath += s.inuse;
  }
  assert.ok(beneath > 0.6 * LEAK, `leakSmall with caller above it holds ${beneath} bytes of ${LEAK}`);
  // and inlined: in one location with its caller (pprof's inline frames)
  const leaks = new Set(profile.function.filter((f) => str(f.name) === 'leakSmall').map((f) => Number(f.id)));
  const inline = profile.location.some((l) => l.line.slice(0, -1).some((ln) => leaks.has(Number(ln.functionId))));
  assert.ok(inline, 'leakSmall appears as an inlined line of its caller');
  return beneath;
}

test('TurboFan inlines the fixture\'s leakSmall into caller (the premise)', () => {
  const r = spawnSync(process.execPath, ['--trace-turbo-inlining', fixture], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^Inlining .*<SharedFunctionInfo leakSmall>\} into .*<SharedFunctionInfo caller>\}/m);
});

test('run names the inlined function with file:line, its memory beneath it, its caller above it; go tool pprof and top show it', () => {
  const out = runFixture(false);
  checkInlinedNamed(out);
  const pprof = spawnSync('go', ['tool', 'pprof', '-top', '-symbolize=none', '-nodecount=1000', '-sample_index=inuse_space', out], {
    encoding: 'utf8',
    env: { ...process.env, PPROF_TMPDIR: tempDir('mpp-pprof-') },
    timeout: 60_000,
  });
  assert.equal(pprof.status, 0, pprof.stderr);
  const row = pprof.stdout.split("\n").find((l) => / leakSmall(?: \(inline\))?$/.test(l)); // `(inline)`: on Node 24 and 26 every frame of it is inlined
  assert.ok(row, `go tool pprof -top lists leakSmall:\n${pprof.stdout}`);
  const cum = /^\s*\S+\s+\S+\s+\S+\s+(\S+)\s+([\d.]+)%/.exec(row)!;
  assert.ok(Number(cum[2]) > 50, `leakSmall's cum in pprof: ${row}`);
  const traces = spawnSync('go', ['tool', 'pprof', '-traces', '-symbolize=none', '-sample_index=inuse_space', out], {
    encoding: 'utf8',
    env: { ...process.env, PPROF_TMPDIR: tempDir('mpp-pprof-') },
    timeout: 60_000,
  });
  assert.match(traces.stdout, /leakSmall \(inline\)\n\s+caller\n/, 'pprof: leakSmall inlined, caller above it');
  const top = spawnSync(process.execPath, [cli, 'top', out, '-n', '200'], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(top.status, 0, top.stderr);
  assert.match(top.stdout, /\sleakSmall\s*$/m, 'mimalloc-pprof top lists leakSmall');
});

test('control: without the log\'s inlining (MIMALLOC_PPROF_TEST_NO_INLINE=1) the memory is charged to caller', () => {
  const out = runFixture(true);
  assert.throws(() => checkInlinedNamed(out), /leakSmall/);
  const { samples } = decode(out);
  const caller = samples.filter((s) => s.names.includes('caller')).reduce((a, s) => a + s.inuse, 0);
  assert.ok(caller > 0.6 * LEAK, 'the leak is still there, under caller');
});

// --- the log's reading, on V8's format (src/logging/log.cc) ---

const LOG = [
  'v8-version,11,3,244,8,-node.38,0',
  // leaf and mid interpreted (their SFIs named), then mid's SFI moves in a collection
  'code-creation,JS,10,100,0x1000,40,leaf /app/inl.js:1:14,0xaa0,~',
  'code-source-info,0x1000,7,0,60,C0O20,,',
  'code-creation,JS,10,101,0x1100,40,mid /app/inl.js:4:13,0xbb0,~',
  'sfi-move,0xbb0,0xbc0',
  'script-source,7,/app/inl.js,function leaf(x) {\\n  return x\\x2C 1;\\n}\\n',
  // hot's TurboFan code: offsets 100.. are leaf inlined into mid inlined into hot
  'code-creation,JS,13,200,0x7f0000002000,512,hot /app/inl.js:7:13,0xcc0,*',
  'code-source-info,0x7f0000002000,7,120,300,C0O120C100O20I1C150O90I0C200O200,F0O250F1O80I0,S0xbc0S0xaa0',
  // the same address given to other code later
  'code-creation,JS,13,300,0x7f0000002000,512,other /app/o\\x2Cther.js:1:1,0xdd0,*',
  'code-source-info,0x7f0000002000,8,0,10,C0O1C10O5I0,F0O3,S0xaa0',
  '',
].join('\n');

test('the log: an offset reads as its inlining chain, innermost first, SFIs followed as they move', () => {
  const log = parseV8Log(LOG);
  const names = (pc: number, nth: number, name = 'hot /app/inl.js:7:13') => log.inlinedAt(0x7f0000002000, 512, name, pc, nth).map((f) => `${f.name}:${f.line}`);
  assert.deepEqual(names(0x7f0000002000 + 101, 0), ['leaf:1', 'mid:4']); // return address 101: offset 100
  assert.deepEqual(names(0x7f0000002000 + 100, 0), []); // offset 99: hot's own
  assert.deepEqual(names(0x7f0000002000 + 160, 0), ['mid:4']);
  assert.deepEqual(names(0x7f0000002000 + 300, 0), []);
  // which code object: the second at that address is `other`; the names must agree
  assert.deepEqual(names(0x7f0000002000 + 20, 1, 'other /app/o,ther.js:1:1'), ['leaf:1']);
  assert.deepEqual(names(0x7f0000002000 + 20, -1, 'other /app/o,ther.js:1:1'), ['leaf:1']);
  assert.deepEqual(names(0x7f0000002000 + 101, 1), [], 'not the code it names');
  assert.equal(log.withInlining, 2);
});

// V8 moves code in a collection (code-move): the moved object is found at its new start, by its
// own size, and a move of an address whose last code is of another size leaves that other code
// where it was.
test('the log: moved code is found at its new start; the code a move leaves behind is not', () => {
  const moved = parseV8Log(
    [
      LOG.replace(/\n$/, ''),
      // a smaller object at hot's old start, then hot's second occupant moves
      'code-creation,JS,13,400,0x7f0000002000,64,small /app/s.js:1:1,0xee0,*',
      'code-source-info,0x7f0000002000,9,0,10,C0O1C8O5I0,F0O3,S0xaa0',
      'code-creation,JS,13,401,0x7f0000003000,512,hot2 /app/inl.js:7:13,0xcc0,*',
      'code-source-info,0x7f0000003000,7,120,300,C0O120C100O20I0,F0O250,S0xbc0',
      'code-move,0x7f0000003000,0x7f0000009000',
      'code-move,0x7f0000002000,0x7f000000a000', // small moves, not `other` (its size is 512)
      '',
    ].join('\n'),
  );
  const at = (start: number, size: number, name: string, off: number) => moved.inlinedAt(start, size, name, start + off, -1).map((f) => f.name);
  assert.deepEqual(at(0x7f0000009000, 512, 'hot2 /app/inl.js:7:13', 101), ['mid'], 'the moved code at its new start');
  assert.deepEqual(at(0x7f000000a000, 64, 'small /app/s.js:1:1', 9), ['leaf'], 'small, moved, by its own size');
  assert.deepEqual(at(0x7f000000a000, 512, 'other /app/o,ther.js:1:1', 20), [], 'control: `other` did not move');
  assert.deepEqual(at(0x7f0000002000, 512, 'other /app/o,ther.js:1:1', 20), ['leaf'], '`other` is still at its start');
});

// A log is read as strings of a bounded size (V8's strings end at ~512 MiB): in parts that end
// at a line's end, which read as the whole does; a line longer than a part is skipped.
test('the log read in parts of a few bytes reads as the whole; a position table read where it lies', () => {
  const whole = parseV8Log(LOG);
  const log = parseV8Log(LOG, 160); // every line of LOG is shorter
  const names = (l: V8CodeLog) => l.inlinedAt(0x7f0000002000, 512, 'hot /app/inl.js:7:13', 0x7f0000002000 + 101, 0).map((f) => f.name);
  assert.deepEqual(names(log), ['leaf', 'mid']);
  assert.equal(log.codeObjects, whole.codeObjects);
  // control: parts shorter than hot's lines skip them, and with them what they say
  const short = parseV8Log(LOG, 60);
  assert.deepEqual(names(short), []);
  // a table inside a larger text, up to `end` only: what follows it is not read
  const t = positionTable('x,C5O1I3,y', 2, 8);
  assert.deepEqual([...t.offsets, ...t.ids], [5, 3]);
  const cut = positionTable('C5O3I2', 0, 4);
  assert.deepEqual([...cut.offsets, ...cut.ids], [5, -1], 'the inlining id past the end is not the entry\'s');
});

// The in-process reader (V8LogFollower): the same log appended in parts, split mid-line, reads as
// it does whole; lines before the recorded start are not read; a log that shrank is read anew.
// It finds logs by the descriptors this process holds, as V8 holds its own.
test('the log read as it grows: parts split mid-line read as the whole; from a recorded start; a replaced log anew', () => {
  const path = join(tempDir('mpp-follow-'), `isolate-0x1234-${process.pid}-v8.log`);
  writeFileSync(path, '');
  const fd = openSync(path, 'r'); // held, as V8 holds its log
  try {
    const follower = new V8LogFollower();
    const cut = LOG.indexOf('0xcc0'); // inside hot's code-creation line
    appendFileSync(path, LOG.slice(0, cut));
    follower.update();
    appendFileSync(path, LOG.slice(cut));
    const log = follower.update();
    assert.equal(log.withInlining, 2);
    assert.deepEqual(log.inlinedAt(0x7f0000002000, 512, 'hot /app/inl.js:7:13', 0x7f0000002000 + 101, 0).map((f) => f.name), ['leaf', 'mid']);
    assert.equal(follower.update().codeObjects, log.codeObjects, 'nothing read twice');
    // from a start past the first code objects: leaf's SFI unknown, its frame left out
    const late = new V8LogFollower({ [path]: LOG.indexOf('code-creation,JS,13,200') });
    assert.deepEqual(late.update().inlinedAt(0x7f0000002000, 512, 'hot /app/inl.js:7:13', 0x7f0000002000 + 101, 0).map((f) => f.name), []);
    // replaced by a shorter log: read from its beginning
    const whole = log.codeObjects;
    writeFileSync(path, LOG.slice(0, LOG.indexOf('code-creation,JS,13,200')));
    assert.equal(follower.update().codeObjects, whole + 2, 'the shorter log read anew: its two code objects');
  } finally {
    closeSync(fd);
  }
});

// run's reader (src/run/post.ts followCodeLogs): a child's log followed by path while it runs,
// then moved into the run's folder (a rename: the same file) goes on from where it was, reading
// nothing twice; a file it never saw (a copy) is told before anything is read, so that the
// caller reads afresh.
test('the log followed by file: a renamed log goes on where it was; a copy is a file never seen', () => {
  const dir = tempDir('mpp-follow-paths-');
  const path = join(dir, 'isolate-0x1234-99-v8.log');
  const cut = LOG.indexOf('0xcc0'); // inside hot's code-creation line
  writeFileSync(path, LOG.slice(0, cut));
  const follower = new V8LogFollower();
  assert.equal(follower.updatePaths([path]), false, 'a first sight');
  appendFileSync(path, LOG.slice(cut));
  const moved = join(dir, 'v8log.99.0.log');
  renameSync(path, moved);
  assert.equal(follower.updatePaths([moved]), true, 'the renamed log is the file followed');
  const whole = parseV8Log(LOG);
  assert.equal(follower.log.codeObjects, whole.codeObjects, 'nothing read twice, nothing missed');
  assert.equal(follower.log.withInlining, 2);
  assert.deepEqual(follower.log.inlinedAt(0x7f0000002000, 512, 'hot /app/inl.js:7:13', 0x7f0000002000 + 101, 0).map((f) => f.name), ['leaf', 'mid']);
  assert.equal(follower.follows([moved]), true);
  const copy = join(dir, 'v8log.99.1.log');
  copyFileSync(moved, copy);
  assert.equal(follower.follows([moved, copy]), false, 'a copy is another file, told before anything is read');
  assert.equal(follower.log.codeObjects, whole.codeObjects, 'follows() read nothing');
  assert.equal(follower.updatePaths([copy]), false, 'a copy is another file');
  assert.equal(follower.updatePaths([join(dir, 'absent.log')]), false, 'an unreadable path');
});

test('symbolize: an optimised frame gets one line per inlined function before its own, by the map of its time', () => {
  const dir = tempDir('mpp-inlined-');
  const map = join(dir, 'perf-1.map');
  const before = '7f0000001000 40 JS:~boot node:internal/x:1:1\n';
  const first = '7f0000002000 200 JS:*hot /app/inl.js:7:13\n';
  const second = '7f0000002000 200 JS:*other /app/o,ther.js:1:1\n';
  writeFileSync(map, before + first + second);
  // sizes in the map are hex: 0x200 = 512
  const p = makeProfile({ samples: [0, 1].map(() => ({ stack: ['leaf_alloc'], values: [0, 0, 1, 1000] })) });
  const jit = new Location({ id: p.location.reduce((a, l) => Math.max(a, Number(l.id)), 0) + 1, address: 0x7f0000002000 + 101 });
  p.location.push(jit);
  const key = p.stringTable.dedup('jit_map_bytes');
  p.sample.forEach((s, i) => {
    s.locationId = [...s.locationId, jit.id];
    s.label = [...s.label, new Label({ key, num: Buffer.byteLength(before + first + (i === 1 ? second : '')) })];
  });
  symbolize(p, { perfMapPath: map, v8Log: parseV8Log(LOG), v8LogFrom: Buffer.byteLength(before) });
  const str = (x: number | bigint) => p.stringTable.strings[Number(x)] ?? '';
  const fn = new Map(p.function.map((f) => [Number(f.id), f]));
  const loc = new Map(p.location.map((l) => [Number(l.id), l]));
  const lines = p.sample.map((s) => loc.get(Number(s.locationId[s.locationId.length - 1]))!.line.map((l) => `${str(fn.get(Number(l.functionId))!.name)}:${Number(l.line)}`));
  // the first sample's hot inlined leaf into mid at offset 100; the second's code was other,
  // whose offset 100 is leaf inlined
  assert.deepEqual(lines, [['leaf:1', 'mid:4', 'hot:7'], ['leaf:1', 'other:1']]);
  const leaf = p.function.find((f) => str(f.name) === 'leaf')!;
  assert.equal(str(leaf.filename), '/app/inl.js');
  assert.equal(str(leaf.systemName), 'JS:*leaf /app/inl.js:1:14');
  process.env.MIMALLOC_PPROF_TEST_NO_INLINE = '1';
  try {
    const q = makeProfile({ samples: [{ stack: ['leaf_alloc'], values: [0, 0, 1, 1000] }] });
    const j = new Location({ id: q.location.reduce((a, l) => Math.max(a, Number(l.id)), 0) + 1, address: 0x7f0000002000 + 101 });
    q.location.push(j);
    q.sample[0]!.locationId = [...q.sample[0]!.locationId, j.id];
    symbolize(q, { perfMapPath: map, v8Log: parseV8Log(LOG), v8LogFrom: Buffer.byteLength(before) });
    assert.equal(q.location.find((l) => l.id === j.id)!.line.length, 1, 'control: the outer function only');
  } finally {
    delete process.env.MIMALLOC_PPROF_TEST_NO_INLINE;
  }
});

test('a position table read by hand: offsets, inlining ids (-1: none), negative script offsets, and code order restored when the log is out of it', () => {
  const t = positionTable('C0O0C4O1182I0C9O-1C17O53I2');
  assert.deepEqual([...t.offsets], [0, 4, 9, 17]);
  assert.deepEqual([...t.ids], [-1, 0, -1, 2]);
  const u = positionTable('C9O1I1C4O2C9O3I3C0O4');
  assert.deepEqual([...u.offsets], [0, 4, 9, 9]);
  assert.deepEqual([...u.ids], [-1, -1, 1, 3], 'equal offsets keep their order');
  assert.equal(positionTable('').offsets.length, 0);
});

test('the in-process API names the inlined function too: profiler.start() turns V8\'s code log on, the worker reads it as it grows', (t) => {
  const beneath = checkInlinedNamed(apiFixture(false));
  t.diagnostic(`leakSmall with caller above it: ${beneath} bytes of ${LEAK}`);
});

test('control: the in-process API with the code log off (MIMALLOC_PPROF_V8_LOG=0) charges the memory to the caller', () => {
  assert.throws(() => checkInlinedNamed(apiFixture(true)), /leakSmall/);
});
