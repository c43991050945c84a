/** The RSS breakdown's comment codec and the smaps reader (the measurement itself is tested
 * end to end in test/run/rss.test.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Profile } from '../../src/profile/pprof.js';

import { parseSmaps } from '../../src/node/rss.cjs';
import { formatRssComment, formatRssLines, parseRssBreakdown, rssParts, settleRssBreakdown, type RssBreakdown } from '../../src/profile/rss.js';

const b: RssBreakdown = {
  rss: 100_000_000,
  runtime: 20_000_000,
  v8Used: 9_000_000,
  v8Committed: 12_000_000,
  nativeInUse: 30_000_000.4,
  nativeStdError: 1_500_000,
  allocatorOverhead: 10_000_000,
  libraries: 1_000_000,
  libraryNames: [{ name: 'libvips.so.42', bytes: 1_000_000 }],
  profiler: 2_000_000,
  code: 35_000_000,
  stacks: 500_000,
  other: 1_499_999.6,
};

function withComments(...comments: string[]): Profile {
  const p = new Profile();
  for (const c of comments) p.comment.push(p.stringTable.dedup(c));
  return p;
}

test('the comment round-trips every figure but the library names (bytes, rounded)', () => {
  const back = parseRssBreakdown(withComments('other comment', formatRssComment(b)));
  assert.ok(back);
  const { libraryNames: _names, ...rest } = b;
  for (const [k, v] of Object.entries(rest)) assert.equal(back[k as keyof RssBreakdown], Math.round(v as number), k);
  assert.equal(back.libraryNames, undefined);
});

test('the parts sum to RSS; optional parts appear only when measured', () => {
  assert.equal(Math.round(rssParts(b).reduce((a, p) => a + p.bytes, 0)), b.rss);
  const { allocatorOverhead: _a, libraries: _l, ...withoutOwners } = b;
  assert.deepEqual(
    rssParts(withoutOwners).map((p) => p.name),
    ['V8 and Node', 'native in use', 'profiler', 'code and mapped files', 'thread stacks', 'other'],
  );
  // exact counters take the estimate's place in the sum
  assert.equal(rssParts({ ...b, nativeExact: 29_000_000 })[1]!.bytes, 29_000_000);
  assert.match(formatRssLines(b, (n) => `${n}`).join('\n'), /libvips\.so\.42 1000000/);
});

test('a missing required figure, or none at all, reads as no breakdown; the last comment wins', () => {
  assert.equal(parseRssBreakdown(withComments('rss_breakdown: rss=1 runtime=2')), undefined);
  assert.equal(parseRssBreakdown(withComments()), undefined);
  const later = formatRssComment({ ...b, rss: 123 });
  assert.equal(parseRssBreakdown(withComments(formatRssComment(b), later))?.rss, 123);
});

test('smaps: every mapping with its Rss, paths with spaces kept', () => {
  const text = [
    '55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1234                       /usr/bin/my node',
    'Size:                132 kB',
    'Rss:                 128 kB',
    'Pss:                 128 kB',
    '7f0000000000-7f0000100000 rw-p 00000000 00:00 0 ',
    'Rss:                  64 kB',
    '7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]',
    'Rss:                  12 kB',
    '',
  ].join('\n');
  const maps = parseSmaps(text);
  assert.deepEqual(
    maps.map((m) => [m.path, m.rss, m.lo.toString(16)]),
    [
      ['/usr/bin/my node', 128 * 1024, '55d0c0a00000'],
      ['', 64 * 1024, '7f0000000000'],
      ['[stack]', 12 * 1024, '7ffc00000000'],
    ],
  );
});

// issue 29 (7): every Node run printed a negative `other` (-385 KiB to -984 KiB), and an
// estimate of native memory above mimalloc's resident bytes gave a negative overhead. This is the
// breakdown of one such run (leak2.js, 2026-12-04) as the profile's comment carried it.
const negative = 'rss_breakdown: rss=134885376 runtime=31629312 v8Used=25230328 v8Committed=59383808 nativeInUse=53428935 nativeStdError=3175524 allocatorOverhead=7011641 libraries=0 profiler=163840 code=43319296 stacks=196608 other=-864256';

test('a breakdown whose parts came to more than RSS: no part negative, the excess said as such', () => {
  const raw = Object.fromEntries(negative.slice('rss_breakdown: '.length).split(' ').map((kv) => kv.split('=')).map(([k, v]) => [k, Number(v)])) as unknown as RssBreakdown;
  // control: the input is what used to print `other -844KiB`
  assert.equal(raw.other, -864256);
  const b = parseRssBreakdown(withComments(negative));
  assert.ok(b);
  assert.equal(b.other, 0);
  assert.equal(b.overcount, 864256);
  for (const p of rssParts(b)) assert.ok(p.bytes >= 0, `${p.name} ${p.bytes}`);
  // the parts sum to RSS and the excess
  assert.equal(Math.round(rssParts(b).reduce((a, p) => a + p.bytes, 0)), b.rss + 864256);
  const lines = formatRssLines(raw, (n) => `${n}`).join('\n');
  assert.doesNotMatch(lines, /(^|\s)-\d/m, lines);
  assert.match(lines, /the parts come to 864256 more than RSS/);
  // the comment written from the raw figures carries them settled
  assert.match(formatRssComment(raw), / other=0 overcount=864256$/);
});

test('native in use above what mimalloc has resident: the overhead is 0, the part is the resident bytes', () => {
  const over: RssBreakdown = { ...b, nativeInUse: 45_000_000, allocatorOverhead: -5_000_000 };
  const s = settleRssBreakdown(over);
  assert.equal(s.allocatorOverhead, 0);
  assert.equal(s.nativeNotResident, 5_000_000);
  const parts = Object.fromEntries(rssParts(over).map((p) => [p.name, p.bytes]));
  assert.equal(parts['native in use'], 40_000_000);
  assert.equal(parts['allocator overhead'], 0);
  assert.equal(Math.round(rssParts(over).reduce((a, p) => a + p.bytes, 0)), over.rss);
  assert.match(formatRssLines(over, (n) => `${n}`).join('\n'), /estimate 45000000 is 5000000 more than mimalloc has resident/);
  assert.equal(parseRssBreakdown(withComments(formatRssComment(over)))?.nativeNotResident, 5_000_000);
});

test('positive control: a breakdown that adds up is left as it is', () => {
  assert.deepEqual(settleRssBreakdown(b), b);
  assert.equal(parseRssBreakdown(withComments(formatRssComment(b)))?.overcount, undefined);
  assert.doesNotMatch(formatRssLines(b, (n) => `${n}`).join('\n'), /more than RSS/);
});
