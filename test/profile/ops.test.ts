/** Operations: scale, merge, diff, top (against go tool pprof -top). */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { ProfileMismatchError } from '../../src/errors.js';
import { diff } from '../../src/profile/diff.js';
import { merge } from '../../src/profile/merge.js';
import { findSampleType, str, type Profile } from '../../src/profile/model.js';
import { parseProfile } from '../../src/profile/parse.js';
import { scale } from '../../src/profile/scale.js';
import { top, totalValue } from '../../src/profile/top.js';
import { validateProfile } from '../../src/profile/validate.js';
import { fixture, run, runPreloaded, tempDir } from '../helpers.js';
import { demoProfile, makeProfile, profileFixtures, view } from './util.js';

const values = (p: Profile) => p.sample.map((s) => s.value.map(Number));

test('scale: round(v × r) with halves away from zero, all-zero samples dropped, per-type ratios', () => {
  const p = makeProfile({
    types: [['inuse_objects', 'count'], ['inuse_space', 'bytes']],
    samples: [
      { stack: ['a'], values: [5, -5] },
      { stack: ['b'], values: [1, 1] },
      { stack: ['c'], values: [0, 0] },
    ],
  });
  assert.deepEqual(values(scale(p, 0.5)), [[3, -3], [1, 1]]);
  assert.deepEqual(values(scale(p, 0.1)), [[1, -1]]);
  assert.deepEqual(values(scale(p, [1, 2])), [[5, -10], [1, 2]]);
  assert.deepEqual(values(scale(p, 1)), [[5, -5], [1, 1], [0, 0]], 'all ratios 1: an unchanged copy');
  assert.deepEqual(values(scale(p, -1)), [[-5, 5], [-1, -1]]);
  assert.throws(() => scale(p, [1]), /^TypeError: scale: 1 ratios for 2 sample types$/);
  validateProfile(scale(p, 3));
});

test('merge: sums samples with equal stacks and labels; headers combine as pprof does', () => {
  const a = demoProfile();
  const m = merge([a, demoProfile()]);
  validateProfile(m);
  assert.deepEqual(values(m), values(a).map((v) => v.map((x) => 2 * x)));
  assert.equal(m.location.length, a.location.length);
  assert.equal(m.mapping.length, a.mapping.length);
  assert.deepEqual(m.comment.map((c) => str(m, c)), ['demo profile']);
  assert.equal(str(m, m.defaultSampleType), 'inuse_space');

  // the same binary at another load address (ASLR) is the same mapping; addresses shift onto the first
  const at = (base: number) =>
    makeProfile({
      types: [['inuse_space', 'bytes']],
      mappings: [{ start: base, limit: base + 0x10000, offset: 0x1000, file: '/bin/app' }],
      samples: [{ stack: [base + 0x120, base + 0x340], values: [100] }],
    });
  const aslr = merge([at(0x555500000000), at(0x560000000000)]);
  assert.deepEqual(view(aslr), view(makeProfile({
    types: [['inuse_space', 'bytes']],
    mappings: [{ start: 0x555500000000, limit: 0x555500010000, offset: 0x1000, file: '/bin/app' }],
    samples: [{ stack: [0x555500000120, 0x555500000340], values: [200] }],
  })));

  const two = makeProfile({ types: [['objects', 'count'], ['space', 'bytes']], samples: [] });
  assert.throws(() => merge([a, two]), (e: unknown) => e instanceof ProfileMismatchError && /^profiles with different sample types cannot be merged \(alloc_objects\/count, .* and objects\/count, space\/bytes\)$/.test(e.message));
  assert.throws(() => merge([]), ProfileMismatchError);
});

test('diff: NEXT − BASE by stack of names, or of addresses within each binary; heap aliases match', () => {
  const base = makeProfile({
    types: [['objects', 'count'], ['space', 'bytes']],
    mappings: [{ start: 0x400000, limit: 0x500000, file: '/bin/app' }],
    samples: [
      { stack: ['leaf', 'main'], values: [1, 100] },
      { stack: [0x400100, 0x400200], values: [2, 200] },
      { stack: ['gone', 'main'], values: [3, 300] },
    ],
  });
  const next = makeProfile({
    types: [['alloc_objects', 'count'], ['alloc_space', 'bytes'], ['inuse_objects', 'count'], ['inuse_space', 'bytes']],
    mappings: [{ start: 0x7f0000400000, limit: 0x7f0000500000, file: '/bin/app' }],
    samples: [
      { stack: ['leaf', 'main'], values: [9, 900, 4, 400], labels: [{ key: 'thread', str: 't1' }] },
      { stack: ['leaf', 'main'], values: [9, 900, 1, 50], labels: [{ key: 'thread', str: 't2' }] },
      { stack: [0x7f0000400100, 0x7f0000400200], values: [9, 900, 2, 200] },
      { stack: ['new', 'main'], values: [9, 900, 5, 500] },
    ],
    defaultType: 'inuse_space',
  });
  const d = diff(base, next);
  validateProfile(d);
  assert.deepEqual(d.sampleType.map((t) => str(d, t.type)), ['inuse_objects', 'inuse_space']);
  assert.equal(str(d, d.defaultSampleType), 'inuse_space');
  assert.deepEqual((view(d) as { samples: string[] }).samples, ['gone main = -3,-300 {}', 'leaf main = 4,350 {}', 'new main = 5,500 {}']);
  assert.equal(totalValue(d, 1), 1150);
  assert.throws(
    () => diff(makeProfile({ types: [['samples', 'count']], samples: [] }), next),
    (e: unknown) => e instanceof ProfileMismatchError && e.message === 'the two profiles have no sample type in common (samples and alloc_objects, alloc_space, inuse_objects, inuse_space)',
  );
});

test('top: flat to the leaf, cum once per stack, inline frames, names, pprof order', () => {
  const p = makeProfile({
    types: [['inuse_space', 'bytes']],
    mappings: [{ start: 0x400000, limit: 0x500000, file: '/usr/bin/app' }],
    samples: [
      { stack: ['malloc_wrapper', 'rec', 'rec', 'main'], values: [600] },
      { stack: ['rec', 'main'], values: [-100] },
      { stack: [0x400010, 'main'], values: [200] },
      { stack: [0x9000], values: [100] },
      { stack: ['zero'], values: [0] },
    ],
  });
  assert.deepEqual(top(p, 0), [
    { flat: 600, flatPct: 60, cum: 600, cumPct: 60, name: 'malloc_wrapper' },
    { flat: 200, flatPct: 20, cum: 200, cumPct: 20, name: '[app]' },
    { flat: 100, flatPct: 10, cum: 100, cumPct: 10, name: '0x9000' },
    { flat: -100, flatPct: -10, cum: 500, cumPct: 50, name: 'rec' },
    { flat: 0, flatPct: 0, cum: 700, cumPct: 70, name: 'main' },
  ]);
  assert.deepEqual(top(p, 0, 2).map((r) => r.name), ['malloc_wrapper', '[app]']);
  // an inlined frame: one location with two lines, innermost first (leaf = the inlined one)
  const q = demoProfile();
  const leaf = q.location.find((l) => l.line.length > 0)!; // leaf_alloc
  const main = q.location.find((l) => l.line.length > 0 && str(q, q.function[Number(l.line[0]!.functionId) - 1]!.name) === 'main')!;
  leaf.line.push(main.line[0]!); // leaf_alloc inlined into main
  const rows = top(q, 3);
  const row = (n: string) => rows.find((r) => r.name === n)!;
  assert.equal(row('leaf_alloc').flat, 4194560 + 1212696);
  assert.equal(row('main').cum, row('leaf_alloc').cum, 'main counted once per stack although present twice');
  assert.throws(() => top(q, 9), /^RangeError: sample index 9 is not one of the profile's 4 sample types$/);
});

/** `go tool pprof -top` rows: name → [flat, flat%, cum, cum%]. */
function pprofTop(file: string, index: string): Map<string, number[]> {
  const r = run('go', ['tool', 'pprof', '-top', '-symbolize=none', '-unit=B', '-nodefraction=0', '-edgefraction=0', '-nodecount=100000', `-sample_index=${index}`, file], {
    PPROF_TMPDIR: tempDir('mpp-pprof-'),
  });
  assert.equal(r.status, 0, r.stderr);
  const rows = new Map<string, number[]>();
  for (const line of r.stdout.split('\n')) {
    const m = /^\s*(-?\d+)B?\s+(-?[\d.]+)%\s+-?[\d.]+%\s+(-?\d+)B?\s+(-?[\d.]+)%\s+(.+?)\s*$/.exec(line);
    if (m) rows.set(m[5]!, [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])]);
  }
  return rows;
}

function checkTopAgainstPprof(file: string, index: string): void {
  const p = parseProfile(readFileSync(file), file);
  const ours = top(p, findSampleType(p, index));
  const theirs = pprofTop(file, index);
  assert.ok(theirs.size > 0, `${file}: pprof printed rows`);
  const unknown = ours.filter((r) => r.name.startsWith('0x'));
  for (const r of ours) {
    if (r.name.startsWith('0x')) continue; // pprof calls unmapped addresses <unknown>
    const t = theirs.get(r.name);
    assert.ok(t, `${file}: ${r.name} in pprof's top`);
    assert.equal(r.flat, t[0], `${file} ${r.name} flat`);
    assert.equal(r.cum, t[2], `${file} ${r.name} cum`);
    assert.ok(Math.abs(r.flatPct - t[1]!) < 0.006 && Math.abs(r.cumPct - t[3]!) < 0.006, `${file} ${r.name} %`);
  }
  assert.equal(ours.length - unknown.length + (unknown.length > 0 ? 1 : 0), theirs.size, `${file}: same rows`);
}

test('top agrees with go tool pprof -top on native dumps (text and proto, fixtures and a fresh run)', () => {
  for (const f of ['ls-accum.heap', 'ls-accum.pb']) {
    checkTopAgainstPprof(join(profileFixtures, f), 'inuse_space');
    checkTopAgainstPprof(join(profileFixtures, f), 'alloc_space');
  }
  const dir = tempDir();
  const r = runPreloaded(fixture('sites'), [join(dir, 'p.heap'), join(dir, 'p.pb'), '0.05'], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '65536',
    MIMALLOC_PROF_SEED: '3',
  });
  assert.equal(r.status, 0, r.stderr);
  checkTopAgainstPprof(join(dir, 'p.heap'), 'inuse_space');
  checkTopAgainstPprof(join(dir, 'p.pb'), 'inuse_space');
  checkTopAgainstPprof(join(dir, 'p.pb'), 'inuse_objects');
});

test('diff of two real runs: sums are preserved, identical seeded runs cancel, ASLR does not matter', () => {
  const dump = (scaleArg: string, seed: string) => {
    const dir = tempDir();
    const r = runPreloaded(fixture('sites'), [join(dir, 'p.heap'), join(dir, 'p.pb'), scaleArg], {
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_SAMPLE_INTERVAL: '65536',
      MIMALLOC_PROF_SEED: seed,
    });
    assert.equal(r.status, 0, r.stderr);
    return { text: parseProfile(readFileSync(join(dir, 'p.heap')), 'p.heap'), proto: parseProfile(readFileSync(join(dir, 'p.pb')), 'p.pb') };
  };
  const small = dump('0.05', '5');
  const big = dump('0.1', '6');
  for (const kind of ['text', 'proto'] as const) {
    const d = diff(small[kind], big[kind]);
    const i = findSampleType(d, 'inuse_space');
    const sum = (p: Profile) => p.sample.reduce((a, s) => a + Number(s.value[findSampleType(p, 'inuse_space')]), 0);
    assert.equal(sum(d), sum(big[kind]) - sum(small[kind]), kind);
    assert.ok(sum(d) > 0);
    assert.ok(top(d, i)[0]!.cum > 0);
  }
  const again = dump('0.05', '5');
  assert.notEqual(again.proto.mapping[0]!.memoryStart, small.proto.mapping[0]!.memoryStart, 'PIE loads elsewhere');
  assert.equal(diff(small.proto, again.proto).sample.length, 0, 'the same seeded run cancels out');
  assert.equal(diff(small.text, again.text).sample.length, 0);
  // text and proto dumps of one snapshot line up (maps lines vs program headers, other paths)
  const cross = diff(small.text, small.proto);
  const ci = findSampleType(cross, 'inuse_space');
  const residue = cross.sample.reduce((a, s) => a + Math.abs(Number(s.value[ci])), 0);
  assert.ok(residue <= small.text.sample.length, `only pprof truncation vs writer rounding remains (${residue})`);
});
