/** `mimalloc-pprof convert`: one expectation per command line. */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';

import { encodeHeapText } from '../../src/profile/heap-text.js';
import { parseProfile } from '../../src/profile/parse.js';
import { pprofRaw } from '../helpers.js';
import { demoProfile, profileFixtures, view } from '../profile/util.js';
import { cli, cliFixtures, isOneLineError } from './util.js';

let dir = '';
before(() => {
  dir = cliFixtures();
});
const f = (name: string) => join(dir, name);

test('convert IN.pb.gz OUT.heap writes heap_v2 text', async () => {
  const r = await cli(['convert', f('demo.pb.gz'), f('out.heap')]);
  assert.deepEqual(r, { status: 0, stdout: '', stderr: '' });
  assert.equal(readFileSync(f('out.heap'), 'utf8'), encodeHeapText(demoProfile(), f('demo.pb.gz')));
});

test('convert IN.heap OUT.pb.gz writes gzipped proto that pprof reads', async () => {
  const src = join(profileFixtures, 'ls-accum.heap');
  const r = await cli(['convert', src, f('ls.pb.gz')]);
  assert.deepEqual(r, { status: 0, stdout: '', stderr: '' });
  const data = readFileSync(f('ls.pb.gz'));
  assert.deepEqual([data[0], data[1]], [0x1f, 0x8b]);
  assert.deepEqual(view(parseProfile(data, 'ls.pb.gz')), view(parseProfile(readFileSync(src), 'ls-accum.heap')));
  const a = pprofRaw(src, undefined, ['-symbolize=none']);
  const b = pprofRaw(f('ls.pb.gz'), undefined, ['-symbolize=none']);
  assert.deepEqual(b.samples.map((s) => s.values), a.samples.map((s) => s.values));
});

test('convert IN OUT.pprof / OUT.pb / OUT.txt pick the format by extension', async () => {
  const src = join(profileFixtures, 'ls-accum.pb');
  for (const out of ['x.pprof', 'x.pb', 'X.PB.GZ']) {
    assert.equal((await cli(['convert', src, f(out)])).status, 0);
    assert.deepEqual([readFileSync(f(out))[0], readFileSync(f(out))[1]], [0x1f, 0x8b], out);
  }
  assert.equal((await cli(['convert', src, f('x.txt')])).status, 0);
  assert.match(readFileSync(f('x.txt'), 'utf8'), /^heap profile: \d+: \d+ \[\d+: \d+\] @ heap_v2\/4096\n/);
  assert.deepEqual(readdirSync(dir).filter((n) => n.includes('.tmp-')), [], 'no temporary files left');
});

test('convert --help', async () => {
  const r = await cli(['convert', '--help']);
  assert.equal(r.status, 0);
  assert.match(r.stdout, /^Usage: mimalloc-pprof convert IN OUT\n/);
  assert.match(r.stdout, /\.pb\.gz, \.pb, \.pprof {2}gzipped profile\.proto/);
});

test('convert errors: one line, exit 2, no output file', async () => {
  const cases: [string[], RegExp][] = [
    [['convert', f('demo.pb.gz')], /^mimalloc-pprof: convert takes two files, IN and OUT \(got .*\)\n$/],
    [['convert', f('demo.pb.gz'), f('x.json')], /^mimalloc-pprof: convert: cannot tell the output format from .*x\.json \(use one of \.pb\.gz, \.pprof, \.pb, \.heap, \.txt\)\n$/],
    [['convert', f('demo.pb.gz'), '/nonexistent/dir/x.pb.gz'], /^mimalloc-pprof: cannot write \/nonexistent\/dir\/x\.pb\.gz: no such file or directory\n$/],
    [['convert', f('cpu.pb.gz'), f('cpu.heap')], /^mimalloc-pprof: .*cpu\.pb\.gz: cannot be written as heap_v2 text: it has no in-use objects and space sample types \(it has samples, cpu\)\n$/],
    [['convert', f('garbage.pb'), f('g.pb.gz')], /^mimalloc-pprof: .*garbage\.pb: is neither profile\.proto/],
    [['convert', f('demo.pb.gz'), f('o.heap'), '-x'], /^mimalloc-pprof: convert: Unknown option '-x' \(see mimalloc-pprof convert --help\)\n$/],
  ];
  for (const [argv, re] of cases) {
    const r = await cli(argv);
    assert.ok(isOneLineError(r), JSON.stringify(r));
    assert.match(r.stderr, re);
  }
  assert.ok(!existsSync(f('cpu.heap')) && !existsSync(f('g.pb.gz')) && !existsSync(f('x.json')));
});

test('convert to heap_v2 text leaves JavaScript-heap samples out and says so (no 0x0 row)', async () => {
  const { makeProfile, HEAP_TYPES } = await import('../profile/util.js');
  const { encodeProfile } = await import('../../src/profile/proto.js');
  const { writeFileSync } = await import('node:fs');
  const p = makeProfile({
    types: HEAP_TYPES,
    period: 524288,
    mappings: [{ start: 0x400000, limit: 0x500000, file: '/bin/app' }],
    samples: [
      { stack: [0x401000, 0x402000], values: [1, 1048576, 1, 1048576], labels: [{ key: 'heap', str: 'native' }] },
      { stack: ['jsHolder'], values: [1, 524288, 1, 524288], labels: [{ key: 'heap', str: 'js' }] },
    ],
  });
  writeFileSync(f('mixed.pb.gz'), encodeProfile(p));
  const r = await cli(['convert', f('mixed.pb.gz'), f('mixed.heap')]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /^mimalloc-pprof: convert: left out 1 JavaScript-heap sample \(512KiB in use\): heap_v2 text holds native addresses only/);
  const text = readFileSync(f('mixed.heap'), 'utf8');
  const rows = text.split('\n').filter((l) => /^\s*\d+:\s*\d+ \[/.test(l));
  assert.equal(rows.length, 1, text);
  const top = await cli(['top', f('mixed.heap')]);
  assert.doesNotMatch(top.stdout, /\b0x0\b/);
  // control: the same profile encoded whole carries the address-less sample as a row of its own
  const whole = encodeHeapText(p, 'mixed');
  assert.equal(whole.split('\n').filter((l) => /^\s*\d+:\s*\d+ \[/.test(l)).length, 2);
  writeFileSync(f('whole.heap'), whole);
  assert.match((await cli(['top', f('whole.heap')])).stdout, /\b0x0\b/);
});
