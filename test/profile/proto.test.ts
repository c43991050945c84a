/** The profile.proto codec: strict decoding, validation, round trips, pprof agreement. */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { gunzipSync } from 'node:zlib';

import { Profile as PProfile } from '../../src/profile/pprof.js';

import { ProfileFormatError } from '../../src/errors.js';
import { parseProfile } from '../../src/profile/parse.js';
import { encodeProfile } from '../../src/profile/proto.js';
import { validateProfile } from '../../src/profile/validate.js';
import { pprofRaw, tempDir } from '../helpers.js';
import { demoProfile, makeProfile, profileFixtures, view } from './util.js';

const fixturePb = () => readFileSync(join(profileFixtures, 'ls-accum.pb'));

test('decoding agrees with pprof-format (after its unsigned int64 quirk) on a native dump', () => {
  const data = fixturePb();
  const ours = parseProfile(data, 'ls-accum.pb');
  const theirs = PProfile.decode(data);
  for (const s of theirs.sample) s.value = s.value.map((v) => Number(BigInt.asIntN(64, BigInt(v))));
  assert.deepEqual(view(ours), view(theirs));
  assert.equal(ours.stringTable.strings.length, theirs.stringTable.strings.length);
  assert.equal(BigInt(ours.timeNanos), BigInt(theirs.timeNanos));
});

test('proto → model → proto → model is the identity, and re-encoding is stable', () => {
  for (const [name, data] of [
    ['ls-accum.pb', fixturePb()],
    ['demo', encodeProfile(demoProfile(), { gzip: false })],
  ] as const) {
    const a = parseProfile(data, name);
    const raw = encodeProfile(a, { gzip: false });
    const b = parseProfile(raw, name);
    assert.deepEqual(view(b), view(a), name);
    assert.deepEqual(encodeProfile(b, { gzip: false }), raw, name);
    const gz = encodeProfile(a);
    assert.deepEqual([gz[0], gz[1]], [0x1f, 0x8b]);
    assert.deepEqual(new Uint8Array(gunzipSync(gz)), raw);
    assert.deepEqual(view(parseProfile(gz, name)), view(a));
  }
});

test('negative int64 values, int64 extremes and addresses above 2^53 survive the round trip', () => {
  const p = makeProfile({
    types: [['inuse_objects', 'count'], ['inuse_space', 'bytes']],
    mappings: [{ start: 0xffffffffff600000n, limit: 0xffffffffff601000n, file: '[vsyscall]' }],
    samples: [
      { stack: [0xffffffffff600400n], values: [-3, -3000] },
      { stack: [0x1000], values: [2n ** 62n, -(2n ** 63n)] },
      { stack: [], values: [9007199254740993n, 1] },
    ],
  });
  const back = parseProfile(encodeProfile(p), 'big');
  assert.deepEqual(back.sample.map((s) => s.value), [[-3, -3000], [2n ** 62n, -(2n ** 63n)], [9007199254740993n, 1]]);
  assert.equal(back.location[0]!.address, 0xffffffffff600400n);
  assert.equal(back.mapping[0]!.memoryLimit, 0xffffffffff601000n);
  assert.deepEqual(view(back), view(p));
});

test('go tool pprof reads what encodeProfile writes: same values as the native original', () => {
  const dir = tempDir();
  const orig = join(profileFixtures, 'ls-accum.pb');
  const ours = join(dir, 'ls.pb.gz');
  writeFileSync(ours, encodeProfile(parseProfile(fixturePb(), 'ls-accum.pb')));
  const a = pprofRaw(orig, undefined, ['-symbolize=none']);
  const b = pprofRaw(ours, undefined, ['-symbolize=none']);
  assert.deepEqual(b.types, a.types);
  assert.deepEqual(b.samples.map((s) => [s.values, s.addresses, s.labels]), a.samples.map((s) => [s.values, s.addresses, s.labels]));
  assert.deepEqual(b.mappings, a.mappings);
  assert.deepEqual(b.comments, a.comments);
});

/** Encodes without validation (pprof-format's own encoder), then parses. */
function parseBroken(mutate: (p: PProfile) => void): () => void {
  const p = demoProfile();
  mutate(p);
  const data = p.encode();
  return () => parseProfile(data, 'bad.pb');
}

test('invalid profiles: CheckValid and string-table rules, one sentence each', () => {
  const cases: [string, (p: PProfile) => void, RegExp][] = [
    ['duplicate location id', (p) => (p.location[1]!.id = 1), /^bad\.pb: has two locations with id 1$/],
    ['zero mapping id', (p) => (p.mapping[0]!.id = 0), /^bad\.pb: has a mapping with the reserved id 0$/],
    ['duplicate function id', (p) => (p.function[1]!.id = p.function[0]!.id), /^bad\.pb: has two functions with id 1$/],
    ['unknown mapping', (p) => (p.location[0]!.mappingId = 9), /^bad\.pb: has location 1 referring to mapping 9, which does not exist$/],
    ['unknown function', (p) => (p.location[5]!.line[0]!.functionId = 77), /^bad\.pb: has location 6 with a line referring to function 77, which does not exist$/],
    ['unknown location', (p) => p.sample[0]!.locationId.push(99), /^bad\.pb: has sample 1 referring to location 99, which does not exist$/],
    ['value count', (p) => p.sample[2]!.value.pop(), /^bad\.pb: has sample 3 with 3 values for 4 sample types$/],
    ['string index', (p) => (p.function[0]!.name = 500), /^bad\.pb: has function 1 name = 500, outside its string table of \d+ entries$/],
    ['negative string index', (p) => (p.sampleType[0]!.unit = -1), /^bad\.pb: has sample_type\[0\]\.unit = -1, outside its string table/],
    ['comment index', (p) => p.comment.push(1000), /^bad\.pb: has comment\[1\] = 1000, outside/],
    ['label index', (p) => (p.sample[0]!.label[0]!.key = 321), /^bad\.pb: has sample 1 label key = 321, outside/],
    ['no sample types', (p) => (p.sampleType = []), /^bad\.pb: has samples but no sample types$/],
  ];
  for (const [what, mutate, re] of cases) {
    assert.throws(parseBroken(mutate), (e: unknown) => e instanceof ProfileFormatError && re.test(e.message), what);
  }
  // string_table[0] must be '': a table starting with 'x'
  const p = demoProfile();
  const raw = p.encode();
  const hacked = Buffer.concat([Buffer.from([0x32, 1, 0x78]), raw]); // string "x" first
  assert.throws(() => parseProfile(hacked, 'bad.pb'), /^ProfileFormatError: bad\.pb: has no empty string at string_table\[0\], which profile\.proto requires$/);
});

test('wire-level damage: not profile.proto, with the reason and where', () => {
  const raw = encodeProfile(demoProfile(), { gzip: false });
  const cases: [Uint8Array, RegExp][] = [
    [raw.subarray(0, raw.length - 3), /^bad: is neither profile\.proto \(.* (is cut short at byte \d+ of \d+|claims \d+ bytes at byte \d+ but only \d+ remain)\) nor a heap profile in text \(its first line is not a heap profile header\)$/],
    [Buffer.from([0x0a, 0x05, 0x08]), /\(a value type claims 5 bytes at byte 2 but only 1 remain\)|\(the profile claims 5 bytes/],
    [Buffer.from([0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]), /the profile has a varint over 64 bits at byte 10/],
    [Buffer.from([0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x01]), /varint over 64 bits|longer than 10 bytes/],
    [Buffer.from([0xa3, 0x01]), /the profile has unsupported wire type 3 at byte 2/],
    [Buffer.from([0x00, 0x01]), /field number 0 at byte 0/],
    [Buffer.from([0x12, 0x02, 0x15, 0x01]), /wire type 5|cut short/],
    [Buffer.from([0x0d, 0x01, 0x02, 0x03, 0x04]), /the profile has field 1 with wire type 5 instead of 2 before byte 1/],
  ];
  for (const [data, re] of cases) {
    assert.throws(() => parseProfile(data, 'bad'), (e: unknown) => e instanceof ProfileFormatError && re.test(e.message), String(re));
  }
});

test('size limits: records and repeated values are bounded, and say so', () => {
  const raw = encodeProfile(demoProfile(), { gzip: false });
  assert.throws(() => parseProfile(raw, 'big.pb', { maxRecords: 5 }), /^ProfileFormatError: big\.pb: has more than 5 records \(samples, locations, strings…\), beyond this tool's limit$/);
  assert.throws(() => parseProfile(raw, 'big.pb', { maxScalars: 3 }), /^ProfileFormatError: big\.pb: has more than 3 repeated values/);
  assert.throws(() => parseProfile(raw, 'big.pb', { bogus: 1 } as never), /^TypeError: parseProfile: unknown option 'bogus'$/);
});

test('validateProfile accepts what the codecs produce and rejects non-integers', () => {
  const p = demoProfile();
  validateProfile(p);
  p.sample[0]!.value[1] = 1.5;
  assert.throws(() => validateProfile(p, 'mine'), /^ProfileFormatError: mine: has a non-integer sample 1 value \(1\.5\)$/);
  assert.throws(() => encodeProfile(p), /non-integer/);
});
