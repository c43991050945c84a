/** `mimalloc-pprof top`: one expectation per command line. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { before, test } from 'node:test';

import { profileFixtures } from '../profile/util.js';
import { cli, cliFixtures, isOneLineError } from './util.js';

let dir = '';
before(() => {
  dir = cliFixtures();
});
const f = (name: string) => join(dir, name);
/** The fixture's libc frame is named from this machine's libc: by its local symbol where a debug
 * file for its build ID is installed (Debian's libc6-dbg, which valgrind brings), else as the
 * object. Either is right; the expectations say `[libc.so.6]`. */
const libcAsObject = (out: string) => out.replace(/ _nl_load_domain\n/g, ' [libc.so.6]\n');

test('top FILE (gzipped proto, symbolised and not)', async () => {
  const r = await cli(['top', f('demo.pb.gz')]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '');
  assert.equal(
    libcAsObject(r.stdout),
    `Type: inuse_space
Total: 17.2MiB; showing 6 of 6 entries
   flat   flat%      cum    cum%  name
11.6MiB  67.15%  12.1MiB  70.06%  [demo]
5.16MiB  29.94%  5.16MiB  29.94%  leaf_alloc
 513KiB   2.91%   513KiB   2.91%  [libc.so.6]
     0B   0.00%  1.16MiB   6.72%  alloc_big
     0B   0.00%     4MiB  23.23%  alloc_small
     0B   0.00%  5.16MiB  29.94%  main
`,
  );
});

test('top FILE --sample-index alloc_objects -n 3 (counts are not humanised)', async () => {
  const r = await cli(['top', f('demo.pb.gz'), '--sample-index', 'alloc_objects', '-n', '3']);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(
    libcAsObject(r.stdout),
    `Type: alloc_objects
Total: 98692; showing 3 of 7 entries
 flat   flat%    cum    cum%  name
81926  83.01%  81926  83.01%  leaf_alloc
15730  15.94%  15730  15.94%  0x1234
 1025   1.04%   1025   1.04%  [libc.so.6]
`,
  );
});

test('top FILE.heap (native heap_v2 text) --count 1', async () => {
  const r = await cli(['top', join(profileFixtures, 'ls-accum.heap'), '--count', '1']);
  assert.equal(r.status, 0, r.stderr);
  // raw input is named from this machine's files (src/symbolize/raw.ts): how many entries
  // that makes depends on its libc
  assert.equal(
    r.stdout.replace(/showing 1 of \d+ entries/, 'showing 1 of N entries'),
    `Type: inuse_space
Total: 204KiB; showing 1 of N entries
  flat   flat%     cum     cum%  name
186KiB  91.15%  204KiB  100.00%  [ls]
`,
  );
});

test('top --help', async () => {
  const r = await cli(['top', '--help']);
  assert.equal(r.status, 0);
  assert.match(r.stdout, /^Usage: mimalloc-pprof top FILE \[--sample-index TYPE\] \[-n N\]\n/);
  assert.match(r.stdout, /--sample-index TYPE {2}inuse_space\|inuse_objects\|alloc_space\|alloc_objects/);
  assert.equal((await cli(['top', '-h'])).stdout, r.stdout);
});

test('top usage errors: one line, exit 2', async () => {
  const cases: [string[], string][] = [
    [['top'], 'top takes one FILE (got nothing)'],
    [['top', 'a', 'b'], 'top takes one FILE (got a b)'],
    [['top', f('demo.pb.gz'), '--sample-index', 'bogus'], 'top: --sample-index must be one of inuse_space, inuse_objects, alloc_space, alloc_objects (got bogus)'],
    [['top', f('demo.pb.gz'), '-n', '0'], 'top: -n must be a positive integer (got 0)'],
    [['top', f('demo.pb.gz'), '-n', '2x'], 'top: -n must be a positive integer (got 2x)'],
    [['top', f('demo.pb.gz'), '--frob'], "top: Unknown option '--frob' (see mimalloc-pprof top --help)"],
    [['top', f('demo.pb.gz'), '--sample-index'], "top: Option '--sample-index <value>' argument missing (see mimalloc-pprof top --help)"],
  ];
  for (const [argv, message] of cases) {
    const r = await cli(argv);
    assert.ok(isOneLineError(r), JSON.stringify(r));
    assert.equal(r.stderr, `mimalloc-pprof: ${message}\n`);
  }
});

test('top bad input: missing file, directory, not a profile, missing sample types', async () => {
  const cases: [string[], RegExp][] = [
    [['top', f('nope.pb')], /^mimalloc-pprof: cannot read .*nope\.pb: no such file or directory\n$/],
    [['top', dir], /^mimalloc-pprof: cannot read .*: it is a directory\n$/],
    [['top', f('garbage.pb')], /^mimalloc-pprof: .*garbage\.pb: is neither profile\.proto \(.*\) nor a heap profile in text \(its first line is not a heap profile header\)\n$/],
    [['top', f('cpu.pb.gz')], /^mimalloc-pprof: .*cpu\.pb\.gz has no inuse_space sample type \(it has samples\/count, cpu\/nanoseconds\)\n$/],
    [
      ['top', f('two.heap'), '--sample-index', 'alloc_space'],
      /^mimalloc-pprof: .*two\.heap has no alloc_space sample type \(it has objects\/count, space\/bytes\); heap_v2 text has allocation totals only when recorded with MIMALLOC_PROF_ACCUM=1 and something was freed\n$/,
    ],
  ];
  for (const [argv, re] of cases) {
    const r = await cli(argv);
    assert.ok(isOneLineError(r), JSON.stringify(r));
    assert.match(r.stderr, re);
  }
  // a two-type heap_v2 file still answers for in-use types
  const r = await cli(['top', f('two.heap'), '--sample-index', 'inuse_space']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^Type: inuse_space\nTotal: 512KiB; showing 1 of 1 entries\n  flat    flat%     cum     cum%  name\n512KiB  100.00%  512KiB  100.00%  0xfff\n$/);
});

test('rough edges: a negative -n, a URL of another scheme, --timeout', async () => {
  for (const argv of [
    ['top', f('demo.pb.gz'), '-n', '-5'],
    ['top', f('demo.pb.gz'), '--count', '-5'],
  ]) {
    const r = await cli(argv);
    assert.ok(isOneLineError(r), JSON.stringify(r));
    assert.equal(r.stderr, 'mimalloc-pprof: top: -n must be a positive integer (got -5)\n');
  }
  // control: a negative value that is not a number is still an unknown option
  const unknown = await cli(['top', f('demo.pb.gz'), '-n', '-x']);
  assert.match(unknown.stderr, /argument is ambiguous|Unknown option/);
  for (const url of ['ftp://127.0.0.1/x', 'file:///tmp/x.pb.gz']) {
    const r = await cli(['top', url]);
    assert.ok(isOneLineError(r), JSON.stringify(r));
    assert.match(r.stderr, new RegExp(`^mimalloc-pprof: cannot read ${url.replace(/[./]/g, '\\$&')}: unsupported URL scheme \\w+: \\(http:// and https:// only`));
  }
  const bad = await cli(['top', f('demo.pb.gz'), '--timeout', '5 seconds']);
  assert.ok(isOneLineError(bad));
  assert.match(bad.stderr, /--timeout must be a duration/);
});

test('--timeout sets how long a URL that never answers is waited for', async () => {
  const { createServer } = await import('node:net');
  const held: import('node:net').Socket[] = [];
  const hole = createServer((s) => {
    held.push(s);
    s.resume();
  });
  await new Promise<void>((r) => hole.listen(0, '127.0.0.1', r));
  const port = (hole.address() as import('node:net').AddressInfo).port;
  try {
    const waited = async (timeout: string) => {
      const t0 = Date.now();
      const r = await cli(['top', `http://127.0.0.1:${port}/debug/pprof/heap`, '--timeout', timeout]);
      assert.ok(isOneLineError(r), JSON.stringify(r));
      assert.match(r.stderr, /no answer within [\d.]+ s/);
      return Date.now() - t0;
    };
    const short = await waited('300ms');
    const longer = await waited('2s'); // control: the wait follows the option
    assert.ok(short >= 300 && short < 1500, `${short} ms`);
    assert.ok(longer >= 2000 && longer < 3500, `${longer} ms`);
  } finally {
    for (const s of held) s.destroy();
    hole.close();
  }
});
