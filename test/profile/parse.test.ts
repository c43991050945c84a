/** parseProfile: gzip, format detection, bounds. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';

import { ProfileFormatError } from '../../src/errors.js';
import { parseProfile } from '../../src/profile/parse.js';
import { encodeProfile } from '../../src/profile/proto.js';
import { demoProfile, profileFixtures, view } from './util.js';

const isFormatError = (re: RegExp) => (e: unknown) => e instanceof ProfileFormatError && re.test(e.message) && !e.message.includes('\n');

test('gzipped proto and gzipped text are read like the plain ones', () => {
  const text = readFileSync(join(profileFixtures, 'ls-accum.heap'));
  const proto = encodeProfile(demoProfile(), { gzip: false });
  assert.deepEqual(view(parseProfile(gzipSync(text), 'x.heap.gz')), view(parseProfile(text, 'x.heap')));
  assert.deepEqual(view(parseProfile(gzipSync(proto), 'x.pb.gz')), view(parseProfile(proto, 'x.pb')));
  // two gzip members are one stream, as Go's gzip reader reads them
  const half = Math.floor(text.length / 2);
  const two = Buffer.concat([gzipSync(text.subarray(0, half)), gzipSync(text.subarray(half))]);
  assert.deepEqual(view(parseProfile(two, 'two.gz')), view(parseProfile(text, 'x.heap')));
});

test('gzip problems and bombs stop with one sentence', () => {
  const gz = gzipSync(readFileSync(join(profileFixtures, 'ls-accum.heap')));
  assert.throws(() => parseProfile(gz.subarray(0, gz.length - 20), 'cut.gz'), isFormatError(/^cut\.gz: is gzip data that cannot be decompressed \(unexpected end of file\)$/));
  const bad = Buffer.from(gz);
  bad[bad.length - 6]! ^= 0xff; // CRC
  assert.throws(() => parseProfile(bad, 'crc.gz'), isFormatError(/^crc\.gz: is gzip data that cannot be decompressed \(.*\)$/));
  const bomb = gzipSync(Buffer.alloc(8 << 20));
  assert.ok(bomb.length < 16 << 10);
  assert.throws(() => parseProfile(bomb, 'bomb.gz', { maxBytes: 1 << 20 }), isFormatError(/^bomb\.gz: decompresses to more than 1 MiB, beyond this tool's limit$/));
  assert.throws(() => parseProfile(Buffer.alloc(2 << 20), 'big', { maxBytes: 1 << 20 }), isFormatError(/^big: is larger than 1 MiB, beyond this tool's limit$/));
  // within the limit, 8 MiB of zeros are simply not a profile
  assert.throws(() => parseProfile(bomb, 'zeros.gz'), isFormatError(/^zeros\.gz: is neither profile\.proto \(the profile has field number 0 at byte 0\) nor a heap profile in text \(its first line is not a heap profile header\)$/));
});

test('empty, garbage and gzip-of-gzip inputs', () => {
  assert.throws(() => parseProfile(new Uint8Array(0), 'empty'), isFormatError(/^empty: is empty$/));
  assert.throws(() => parseProfile(gzipSync(new Uint8Array(0)), 'empty.gz'), isFormatError(/^empty\.gz: is empty$/));
  assert.throws(() => parseProfile(Buffer.from('hello world\n'), 'hello'), isFormatError(/^hello: is neither profile\.proto \(.*\) nor a heap profile in text \(its first line is not a heap profile header\)$/));
  const twice = gzipSync(gzipSync(encodeProfile(demoProfile(), { gzip: false })));
  assert.throws(() => parseProfile(twice, 'twice.gz'), isFormatError(/^twice\.gz: is neither profile\.proto/));
});
