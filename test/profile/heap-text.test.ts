/** The heap_v2 text codec: pprof's reading rules, the writer, round trips, real inputs. */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { ProfileFormatError } from '../../src/errors.js';
import { encodeHeapText, parseHeapText } from '../../src/profile/heap-text.js';
import { parseProfile } from '../../src/profile/parse.js';
import { findSampleType, str, type Profile } from '../../src/profile/model.js';
import { fixture, pprofRaw, runPreloaded, tempDir } from '../helpers.js';
import { demoProfile, profileFixtures, view } from './util.js';

const enc = (s: string) => Buffer.from(s, 'latin1');
const parse = (s: string) => parseProfile(enc(s), 't.heap');
const types = (p: Profile) => p.sampleType.map((t) => str(p, t.type));
const values = (p: Profile) => p.sample.map((s) => s.value.map(Number));

/** formats-and-tools.md §1.8, verified against both pprofs. */
const WORKED = `heap profile: 9: 1049088 [11: 1049216] @ heap_v2/524288
 8: 512 [10: 640] @ 0x0040114e 0x00401173 0x004011bb
 1: 1048576 [1: 1048576] @ 0x0040114e 0x004011a8 0x004011c0

MAPPED_LIBRARIES:
00400000-00401000 r--p 00000000 08:01 1234 /tmp/demo_nopie
00401000-00402000 r-xp 00001000 08:01 1234 /tmp/demo_nopie
00402000-00403000 r--p 00002000 08:01 1234 /tmp/demo_nopie
`;

test('the worked example: unsampled values, addresses − 1, the 0x400000 rule, labels, drop frames', () => {
  const p = parse(WORKED);
  assert.deepEqual(types(p), ['alloc_objects', 'alloc_space', 'inuse_objects', 'inuse_space']);
  assert.deepEqual(values(p), [
    [81925, 5243200, 65540, 4194560],
    [1, 1212696, 1, 1212696],
  ]);
  assert.equal(Number(p.period), 524288);
  assert.equal(`${str(p, p.periodType!.type)}/${str(p, p.periodType!.unit)}`, 'space/bytes');
  assert.equal(p.location[0]!.address, 0x40114d);
  assert.deepEqual(
    p.mapping.map((m) => [Number(m.memoryStart), Number(m.memoryLimit), Number(m.fileOffset), str(p, m.filename)]),
    [[0x400000, 0x402000, 0, '/tmp/demo_nopie']],
  );
  assert.ok(p.location.every((l) => l.mappingId === 1));
  assert.deepEqual(
    p.sample.map((s) => s.label.map((l) => `${str(p, l.key)}=${String(l.num)}`)),
    [['bytes=64'], ['bytes=1048576']],
  );
  assert.match(str(p, p.dropFrames), /^calloc\|cfree\|malloc\|free\|/);
  assert.match(str(p, p.keepFrames), /^runtime\\\.panic/);
});

test('the worked example agrees with go tool pprof -raw', () => {
  const dir = tempDir();
  const f = join(dir, 'w.heap');
  writeFileSync(f, WORKED);
  const raw = pprofRaw(f, undefined, ['-symbolize=none']);
  const p = parse(WORKED);
  assert.deepEqual(raw.types, types(p));
  assert.deepEqual(raw.samples.map((s) => s.values), values(p));
  assert.deepEqual(raw.samples.map((s) => s.addresses), p.sample.map((s) => s.locationId.map((id) => Number(p.location[Number(id) - 1]!.address))));
  assert.deepEqual(raw.mappings.map((m) => [m.start, m.limit, m.offset, m.file]), [[0x400000, 0x402000, 0, '/tmp/demo_nopie']]);
});

test('two sample types unless the bracket differs from the in-use pair and is not 0', () => {
  for (const [header, want] of [
    ['heap profile: 1: 64 [1: 64] @ heap_v2/524288', ['objects', 'space']],
    ['heap profile: 1: 64 [0: 0] @ heap_v2/524288', ['objects', 'space']],
    ['heap profile: 1: 64 [2: 64] @ heap_v2/524288', ['alloc_objects', 'alloc_space', 'inuse_objects', 'inuse_space']],
    ['heap profile: 1: 64 [0: 128] @ heap_v2/524288', ['alloc_objects', 'alloc_space', 'inuse_objects', 'inuse_space']],
  ] as const) {
    assert.deepEqual(types(parse(`${header}\n 1: 64 [1: 64] @ 0x1000\n`)), want, header);
  }
});

test('header labels: heap_v2/heapz_v2 (R), heap (R/2), heapprofile (no sampling), growthz; others are not heap text', () => {
  const row = ' 2: 2048 [2: 2048] @ 0x1000\n';
  assert.equal(Number(parse(`heap profile: 2: 2048 [2: 2048] @ heapz_v2/4096\n${row}`).period), 4096);
  const go = parse(`heap profile: 2: 2048 [2: 2048] @ heap/8192\n${row}`);
  assert.equal(Number(go.period), 4096);
  assert.deepEqual(values(go), [[2, 4098]].map(() => values(parse(`heap profile: 2: 2048 [2: 2048] @ heap_v2/4096\n${row}`))[0]!));
  assert.deepEqual(values(parse(`heap profile: 2: 2048 [2: 2048] @ heapprofile\n${row}`)), [[2, 2048]]);
  assert.equal(Number(parse(`heap profile: 2: 2048 [2: 2048] @ growthz\n${row}`).period), 1);
  for (const bad of ['heap profile: 2: 2048 [2: 2048] @ heap_v3/4096', '# heap profile: x', 'heap profile: 2: 2048 @ heap_v2/4096', '']) {
    const r = parseHeapText(enc(`${bad}\n${row}`));
    assert.equal(r.kind, 'unrecognised', bad);
    assert.throws(() => parse(`${bad}\n${row}`), (e: unknown) => e instanceof ProfileFormatError && /^t\.heap: is neither profile\.proto \(.*\) nor a heap profile in text \(.*\)$/.test(e.message));
  }
});

test('blank and # lines are skipped anywhere, CRLF is fine, a no-address row has no locations', () => {
  const p = parse('heap profile: 1: 64 [1: 64] @ heap_v2/1\r\n\r\n# a comment\r\n 1: 64 [1: 64] @ 0x1001\r\n   # another\r\n 1: 32 [1: 32] @\r\n');
  assert.deepEqual(values(p), [[1, 64], [1, 32]]);
  assert.equal(p.sample[1]!.locationId.length, 0);
  assert.equal(p.location[0]!.address, 0x1000);
});

test('pprof quirks kept: uppercase hex truncates the stack, negative in-use pairs, address 0 wraps', () => {
  const up = parse('heap profile: 1: 64 [1: 64] @ heap_v2/1\n 1: 64 [1: 64] @ 0x5560F23957CF 0x1000\n');
  assert.deepEqual(up.sample[0]!.locationId.map((id) => Number(up.location[Number(id) - 1]!.address)), [0x555f]);
  const neg = parse('heap profile: 1: 64 [1: 64] @ heap_v2/1\n -1: -64 [1: 64] @ 0x1000\n');
  assert.deepEqual(values(neg), [[-1, -64]]);
  const zero = parse('heap profile: 1: 64 [1: 64] @ heap_v2/1\n 1: 64 [1: 64] @ 0x0\n');
  assert.equal(zero.location[0]!.address, 0xffffffffffffffffn);
});

test('malformed heap text: one sentence naming the file, the line and the problem', () => {
  const h = 'heap profile: 1: 64 [1: 64] @ heap_v2/524288\n';
  const cases: [string, RegExp][] = [
    [`${h} 0: 512 [0: 0] @ 0x1000\n`, /^t\.heap: line 2 has inuse count 0 but inuse bytes 512$/],
    [`${h} 1: 64 [1: 64] 0x1000\n`, /^t\.heap: line 2 is not a sample row \(`count: bytes \[count: bytes\] @ addresses`\): "1: 64 \[1: 64\] 0x1000"$/],
    [`${h}garbage\n`, /^t\.heap: line 2 is not a sample row/],
    [`${h} 1: 99999999999999999999 [1: 64] @ 0x1000\n`, /^t\.heap: line 2 has a number outside the 64-bit range/],
    [`${h} 1: 64 [1: 64] @ 0x1ffffffffffffffff\n`, /^t\.heap: line 2 has an address over 64 bits: "0x1ffffffffffffffff"$/],
    [`${h}# ok\n 1: 64 [1: 64] @ 0x${'1'.repeat(70000)}\n`, /^t\.heap: line 3 is longer than 64 KiB, more than pprof reads$/],
    [`${h} 1: 64 [1: 64] @ 0x1000\nMAPPED_LIBRARIES:\n${'x'.repeat(70000)}\n`, /^t\.heap: line 4 is longer than 64 KiB/],
  ];
  for (const [text, re] of cases) {
    assert.throws(() => parse(text), (e: unknown) => e instanceof ProfileFormatError && e.code === 'MPP_ERR_PROFILE_FORMAT' && re.test(e.message), text.slice(0, 80));
  }
});

test('maps section: executable entries only, brief lines with build ids, glog prefixes, a fake mapping for the rest', () => {
  const p = parse(`heap profile: 3: 192 [3: 192] @ heap_v2/1
 1: 64 [1: 64] @ 0x555555555101 0x7ffff7c10001 0x9001
 2: 128 [2: 128] @ 0x7ffff7e00001
MAPPED_LIBRARIES:
555555554000-555555555000 r--p 00000000 08:01 42 /usr/bin/demo
555555555000-555555556000 r-xp 00001000 08:01 42 /usr/bin/demo
7ffff7c00000-7ffff7d00000 r-xp 00028000 08:01 7 /usr/lib/libc.so.6
I0101 12:00:00.000 main.cc:12] 7ffff7e00000-7ffff7e10000 r-xp /opt/lib/libz.so.1 (@2000) 0123abcd
some unrelated line
`);
  assert.deepEqual(
    p.mapping.map((m) => `${m.memoryStart.toString(16)}-${m.memoryLimit.toString(16)}@${m.fileOffset.toString(16)} ${str(p, m.filename)} ${str(p, m.buildId)}`),
    ['555555555000-555555556000@1000 /usr/bin/demo ', '7ffff7c00000-7ffff7d00000@28000 /usr/lib/libc.so.6 ', '7ffff7e00000-7ffff7e10000@2000 /opt/lib/libz.so.1 0123abcd', '0-ffffffffffffffff@0  '],
  );
  assert.deepEqual(p.location.map((l) => Number(l.mappingId)), [1, 2, 4, 3]);
});

test('text → model → text → model is the identity (worked example, real file, negative rows)', () => {
  const neg = 'heap profile: 0: 0 [0: 0] @ heap_v2/4096\n -3: -96 [0: 0] @ 0x1000 0x2000\n 5: 5000 [0: 0] @ 0x3000\n';
  for (const [name, text] of [
    ['worked', WORKED],
    ['ls-accum.heap', readFileSync(join(profileFixtures, 'ls-accum.heap'), 'latin1')],
    ['negative', neg],
  ] as const) {
    const a = parse(text);
    const written = encodeHeapText(a, name);
    const b = parse(written);
    assert.deepEqual(view(b), view(a), name);
    assert.equal(encodeHeapText(b, name), written, `${name}: the writer is stable`);
  }
});

test('model → text → model gives back the unsampled values of rows that came from sampling (demo profile)', () => {
  const p = demoProfile();
  const text = encodeHeapText(p, 'demo');
  // symbolised locations (address 0) have nothing to write but 0x1
  assert.equal(
    text.split('\n').slice(0, 6).join('\n'),
    `heap profile: 20: 11535872 [26: 11537324] @ heap_v2/524288
 1: 1024 [2: 2048] @ 0x7ffff7c10011 0x555555555101 0x555555555201
 10: 10485760 [10: 10485760] @ 0x555555555111 0x555555555201
 8: 512 [10: 640] @ 0x1 0x1 0x1
 1: 1048576 [1: 1048576] @ 0x1 0x1 0x1
 0: 0 [3: 300] @ 0x1235`,
  );
  assert.match(text, /\nMAPPED_LIBRARIES:\n555555554000-555555560000 r-xp \/usr\/bin\/demo \(@1000\) abc123\n7ffff7c00000-7ffff7d80000 r-xp 00028000 00:00 0 \/usr\/lib\/x86_64-linux-gnu\/libc\.so\.6\n$/);
  const back = parse(text);
  assert.deepEqual(types(back), types(p));
  assert.deepEqual(values(back), values(p));
});

test('the writer refuses what heap_v2 cannot say', () => {
  const p = demoProfile();
  p.sample[0]!.value = [1, 10, 0, 512];
  assert.throws(() => encodeHeapText(p, 'x.pb'), /^ProfileFormatError: x\.pb: cannot be written as heap_v2 text: sample 1 has in-use 0 objects but 512 bytes$/);
  p.sample[0]!.value = [-1, -10, 1, 512];
  assert.throws(() => encodeHeapText(p, 'x.pb'), /sample 1 has negative allocation values/);
  const cpu = parseProfile(Buffer.from(encodeHeapText(demoProfile())), 'x');
  cpu.sampleType[0]!.type = cpu.stringTable.dedup('samples');
  cpu.sampleType[1]!.type = cpu.stringTable.dedup('cpu');
  cpu.sampleType[2]!.type = cpu.stringTable.dedup('a');
  cpu.sampleType[3]!.type = cpu.stringTable.dedup('b');
  assert.throws(() => encodeHeapText(cpu, 'cpu.pb'), /^ProfileFormatError: cpu\.pb: cannot be written as heap_v2 text: it has no in-use objects and space sample types \(it has samples, cpu, a, b\)$/);
});

test('real text and proto dumps of one run: pprof -raw agrees, and so do the two formats', () => {
  const bin = fixture('sites');
  const dir = tempDir();
  const r = runPreloaded(bin, [join(dir, 'p.heap'), join(dir, 'p.pb'), '0.05'], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '65536',
    MIMALLOC_PROF_ACCUM: '1',
    MIMALLOC_PROF_SEED: '11',
  });
  assert.equal(r.status, 0, r.stderr);
  const totals = (p: Profile, type: string) => {
    const i = findSampleType(p, type);
    return p.sample.reduce((a, s) => a + Number(s.value[i]), 0);
  };
  for (const f of ['p.heap', 'p.pb']) {
    const file = join(dir, f);
    const p = parseProfile(readFileSync(file), f);
    const raw = pprofRaw(file, undefined, ['-symbolize=none']);
    assert.deepEqual(raw.types, types(p), f);
    assert.equal(raw.samples.length, p.sample.length, f);
    const i = findSampleType(p, 'inuse_space');
    const rawTotal = raw.samples.reduce((a, s) => a + s.values[i]!, 0);
    assert.ok(Math.abs(rawTotal - totals(p, 'inuse_space')) <= p.sample.length, `${f}: ${rawTotal} vs ${totals(p, 'inuse_space')}`);
    p.sample.forEach((s, k) => assert.ok(Math.abs(Number(s.value[i]) - raw.samples[k]!.values[i]!) <= 1, `${f} row ${k}`));
  }
  const text = parseProfile(readFileSync(join(dir, 'p.heap')), 'p.heap');
  const proto = parseProfile(readFileSync(join(dir, 'p.pb')), 'p.pb');
  // per row, pprof truncates what the native writer rounds
  assert.ok(Math.abs(totals(text, 'inuse_space') - totals(proto, 'inuse_space')) <= text.sample.length);
  assert.ok(Math.abs(totals(text, 'inuse_objects') - totals(proto, 'inuse_objects')) <= text.sample.length);
  // proto → text → model: each row's raw pair is recovered (within pprof's truncation)
  const again = parse(encodeHeapText(proto, 'p.pb'));
  const io = findSampleType(again, 'inuse_objects');
  const is = findSampleType(again, 'inuse_space');
  assert.equal(again.sample.length, proto.sample.length);
  proto.sample.forEach((s, k) => {
    assert.ok(Math.abs(Number(again.sample[k]!.value[io]) - Number(s.value[2])) <= 1, `row ${k} objects`);
    assert.ok(Math.abs(Number(again.sample[k]!.value[is]) - Number(s.value[3])) <= 1, `row ${k} bytes`);
  });
});
