/**
 * `mimalloc-pprof symbolize` and the naming top and diff do by themselves: raw dumps written
 * by hand (heap_v2 text or proto) get native names from the binaries on this machine and
 * JavaScript names from the process's perf map; a binary rebuilt since the dump is not used.
 */
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { parseProfile } from '../../src/profile/parse.js';
import { root, run, runPreloaded, tempDir } from '../helpers.js';
import { assertFewUnnamed } from '../node-names.js';
import { cli, isOneLineError } from './util.js';

const named = (path: string) => {
  const p = parseProfile(readFileSync(path), path);
  assertFewUnnamed(p, path); // a Node profile's frames, named by symbolize
  return new Set(p.function.map((f) => p.stringTable.strings[Number(f.name)] ?? ''));
};

/** examples/demo.c built in `dir`, run by hand under the preload with a dump at exit. */
function handDump(dir: string, format: 'proto' | 'text', name = 'demo'): { bin: string; dump: string } {
  const bin = join(dir, name);
  const cc = run('cc', ['-g', '-O1', join(root, 'examples', 'demo.c'), '-o', bin]);
  assert.equal(cc.status, 0, cc.stderr);
  const pattern = join(dir, `raw.%p.${format === 'proto' ? 'pb' : 'heap'}`);
  const r = runPreloaded(bin, [], { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '65536', MIMALLOC_PROF_DUMP_AT_EXIT: pattern, MIMALLOC_PROF_DUMP_FORMAT: format });
  assert.equal(r.status, 0, r.stderr);
  const dump = readdirSync(dir).find((f) => f.startsWith('raw.'));
  assert.ok(dump, 'the dump was written');
  return { bin, dump: join(dir, dump) };
}

test('symbolize RAW.pb (a proto dump by hand) names the C functions; the raw file had none (control)', async () => {
  const dir = tempDir();
  const { dump } = handDump(dir, 'proto');
  assert.equal(named(dump).has('tokenize'), false, 'control: the raw dump holds addresses only');
  const r = await cli(['symbolize', dump]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /named \d+ native locations, no JavaScript \(no perf map\)(, \d+ by their file alone \(no symbol\))?; \d+ left as addresses; wrote .*\.pb\.gz/);
  const out = dump.replace(/\.pb$/, '.pb.gz');
  for (const fn of ['tokenize', 'handle_request', 'main']) assert.ok(named(out).has(fn), fn);
});

test('top and diff name a heap_v2 text dump by themselves', async () => {
  const dir = tempDir();
  const { dump } = handDump(dir, 'text');
  const r = await cli(['top', dump, '-n', '40']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /\btokenize\b/);
  const d = await cli(['diff', dump, dump, '-n', '3']);
  assert.equal(d.status, 0, d.stderr);
});

test('a binary rebuilt since the dump (another build ID) is not used to name it', async () => {
  const dir = tempDir();
  const { bin, dump } = handDump(dir, 'proto');
  // the same source built again at -O0 (another build ID, other addresses), over the original
  assert.equal(run('cc', ['-g', '-O0', join(root, 'examples', 'demo.c'), '-o', join(dir, 'o0')]).status, 0);
  copyFileSync(join(dir, 'o0'), bin);
  const r = await cli(['symbolize', dump, '-o', join(dir, 'x.pb.gz')]);
  assert.equal(r.status, 0, r.stderr);
  /** Functions named from the demo binary itself. */
  const fromBin = (path: string) => {
    const p = parseProfile(readFileSync(path), path);
    return p.function.filter((f) => p.stringTable.strings[Number(f.filename)] === bin).length;
  };
  assert.equal(fromBin(join(dir, 'x.pb.gz')), 0, 'no name from the other build');
  // positive control: the same -O0 build without a build ID cannot be told apart, and names
  // (wrong ones, at the old addresses) come back
  assert.equal(run('cc', ['-g', '-O0', '-Wl,--build-id=none', join(root, 'examples', 'demo.c'), '-o', bin]).status, 0);
  assert.equal((await cli(['symbolize', dump, '-o', join(dir, 'y.pb.gz')])).status, 0);
  assert.ok(fromBin(join(dir, 'y.pb.gz')) > 0, 'control: names from the binary without a build ID');
});

test('a Node process dumped by hand (SIGTERM) gets its JavaScript names from its perf map', async () => {
  const dir = tempDir();
  const program = "function keepIt(){globalThis.k=Buffer.allocUnsafeSlow(8<<20)} keepIt(); process.kill(process.pid, 'SIGTERM'); setTimeout(()=>{}, 5000)";
  const r = runPreloaded(process.execPath, ['--perf-basic-prof', '--interpreted-frames-native-stack', '-e', program], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '65536',
    MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'node.%p.pb'),
  });
  assert.equal(r.signal, 'SIGTERM', r.stderr);
  const dump = readdirSync(dir).find((f) => f.startsWith('node.'))!;
  const pid = Number(/node\.(\d+)\.pb/.exec(dump)![1]);
  try {
    const s = await cli(['symbolize', join(dir, dump)]);
    assert.equal(s.status, 0, s.stderr);
    assert.match(s.stderr, new RegExp(`JavaScript from /tmp/perf-${pid}\\.map`));
    assert.ok(named(join(dir, `node.${pid}.pb.gz`)).has('keepIt'));
    // control: another pid's (absent) perf map names no JavaScript
    const c = await cli(['symbolize', join(dir, dump), '--pid', '999999999', '-o', join(dir, 'c.pb.gz')]);
    assert.equal(c.status, 0, c.stderr);
    assert.equal(named(join(dir, 'c.pb.gz')).has('keepIt'), false);
  } finally {
    rmSync(`/tmp/perf-${pid}.map`, { force: true });
    for (const f of readdirSync(process.cwd())) if (f.startsWith('isolate-') && f.includes(`-${pid}-`)) rmSync(f, { force: true });
  }
});

test('symbolize: bad input exits 2 with one line', async () => {
  const dir = tempDir();
  writeFileSync(join(dir, 'junk.pb'), 'not a profile at all');
  for (const argv of [['symbolize', join(dir, 'junk.pb')], ['symbolize', join(dir, 'missing.pb')], ['symbolize', join(dir, 'junk.pb'), '-o', 'x.heap'], ['symbolize']]) {
    const r = await cli(argv);
    assert.equal(r.status, 2, argv.join(' '));
    assert.ok(isOneLineError(r), r.stderr);
  }
  assert.equal(existsSync(join(dir, 'junk.pb.gz')), false, 'nothing written');
});
