/** `mimalloc-pprof diff`: one expectation per command line. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { before, test } from 'node:test';

import { cli, cliFixtures, isOneLineError } from './util.js';

let dir = '';
before(() => {
  dir = cliFixtures();
});
const f = (name: string) => join(dir, name);

test('diff BASE NEW', async () => {
  const r = await cli(['diff', f('base.pb.gz'), f('next.pb.gz')]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(
    r.stdout,
    `Type: inuse_space (${f('next.pb.gz')} − ${f('base.pb.gz')})
Total: 1.2MiB; showing 5 of 5 entries
  flat   flat%      cum    cum%  name
  1MiB  83.39%     1MiB  83.39%  grow
200KiB  16.29%   200KiB  16.29%  leaf
 -4KiB  -0.33%    -4KiB  -0.33%  gone
    0B   0.00%   200KiB  16.29%  cache_fill
    0B   0.00%  1.19MiB  99.35%  main
`,
  );
});

test('diff BASE NEW --sample-index inuse_objects -n 1', async () => {
  const r = await cli(['diff', f('base.pb.gz'), f('next.pb.gz'), '--sample-index', 'inuse_objects', '-n', '1']);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(
    r.stdout,
    `Type: inuse_objects (${f('next.pb.gz')} − ${f('base.pb.gz')})
Total: 202; showing 1 of 5 entries
flat   flat%  cum    cum%  name
 200  99.01%  200  99.01%  leaf
`,
  );
});

test('diff of a heap_v2 text file and a proto (objects/space match inuse_*)', async () => {
  const r = await cli(['diff', f('demo.heap'), f('demo.pb.gz'), '-n', '2']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^Type: inuse_space \(.*demo\.pb\.gz − .*demo\.heap\)\nTotal: 10\.3MiB; showing 2 of 5 entries\n/);
});

test('diff --help', async () => {
  const r = await cli(['diff', '--help']);
  assert.equal(r.status, 0);
  assert.match(r.stdout, /^Usage: mimalloc-pprof diff BASE NEW \[--sample-index TYPE\] \[-n N\]\n/);
});

test('diff errors: one line, exit 2', async () => {
  const cases: [string[], RegExp][] = [
    [['diff', f('base.pb.gz')], /^mimalloc-pprof: diff takes two files, BASE and NEW \(got .*base\.pb\.gz\)\n$/],
    [['diff', f('base.pb.gz'), f('cpu.pb.gz')], /^mimalloc-pprof: the two profiles have no sample type in common \(inuse_objects, inuse_space and samples, cpu\)\n$/],
    [['diff', f('base.pb.gz'), f('nope')], /^mimalloc-pprof: cannot read .*nope: no such file or directory\n$/],
    [['diff', f('garbage.pb'), f('base.pb.gz')], /^mimalloc-pprof: .*garbage\.pb: is neither profile\.proto/],
    [['diff', f('base.pb.gz'), f('next.pb.gz'), '--sample-index', 'alloc_space'], /^mimalloc-pprof: the difference of .* has no alloc_space sample type \(it has inuse_objects\/count, inuse_space\/bytes\)\n$/],
  ];
  for (const [argv, re] of cases) {
    const r = await cli(argv);
    assert.ok(isOneLineError(r), JSON.stringify(r));
    assert.match(r.stderr, re);
  }
});
