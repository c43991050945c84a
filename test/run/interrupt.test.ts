/**
 * A SIGTERM or Ctrl-C to `run` while it names the profiles (after the program has ended)
 * keeps the raw profile beside `out` and V8's perf map beside it (none left in /tmp), says
 * where and how to name it, and exits 128+signal;
 * a run that takes more than a second to name says so in one line. The test build's
 * MIMALLOC_PPROF_TEST_NAMING_DELAY_MS holds naming open long enough to signal it. Control:
 * the same run left alone writes the named profile and keeps no raw one.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, tempDir } from '../helpers.js';
import { waitFor } from '../http/service.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const program = 'globalThis.k = []; for (let i = 0; i < 16; i++) globalThis.k.push(Buffer.alloc(1 << 20, 1));';

function startRun(dir: string) {
  const child = spawn(process.execPath, [cli, 'run', '--out', 'p.pb.gz', '--', process.execPath, '-e', program], {
    cwd: dir,
    env: { ...process.env, MIMALLOC_PPROF_TEST_NAMING_DELAY_MS: '3000' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return { child, stderr: () => stderr, exited };
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`${signal} to run while it names: the raw profile is kept, said where, and symbolize names it`, async () => {
    const dir = tempDir('mpp-interrupt-');
    const r = startRun(dir);
    await waitFor(() => /naming the profile/.test(r.stderr()), 30_000, `the progress line; stderr: ${r.stderr()}`);
    r.child.kill(signal);
    const code = await r.exited;
    assert.equal(code, signal === 'SIGTERM' ? 143 : 130, r.stderr());
    const m = /raw profile of pid (\d+): (\S+), its JavaScript names in (\S+) \(name it with: mimalloc-pprof symbolize \S+\)/.exec(r.stderr());
    assert.ok(m, r.stderr());
    const raw = m[2]!;
    assert.equal(raw, join(dir, `p.${m[1]}.raw.pb`));
    assert.equal((statSync(raw).mode & 0o777).toString(8), '600');
    assert.ok(!existsSync(join(dir, 'p.pb.gz')), 'nothing named was written');
    // V8's perf map: moved beside the raw profile, none left in /tmp
    const perfMap = m[3]!;
    assert.equal(perfMap, join(dir, `p.${m[1]}.perf.map`));
    assert.equal((statSync(perfMap).mode & 0o777).toString(8), '600');
    assert.ok(!existsSync(`/tmp/perf-${m[1]}.map`), 'no perf map left in /tmp');
    const named = spawnSync(process.execPath, [cli, 'symbolize', raw, '-o', join(dir, 'named.pb.gz')], { encoding: 'utf8' });
    assert.equal(named.status, 0, named.stderr);
    assert.ok(existsSync(join(dir, 'named.pb.gz')));
    assert.match(named.stderr, new RegExp(`, [1-9]\\d* JavaScript from ${perfMap.replace(/[.]/g, '\\.')}`), 'its JavaScript frames named from the map beside it');
    // control: without that map there is nothing to name them by
    rmSync(perfMap);
    const bare = spawnSync(process.execPath, [cli, 'symbolize', raw, '-o', join(dir, 'bare.pb.gz')], { encoding: 'utf8' });
    assert.equal(bare.status, 0, bare.stderr);
    assert.match(bare.stderr, /no JavaScript \(no perf map\)/);
  });
}

test('control: left alone, the same run names and writes its profile and keeps no raw one', async () => {
  const dir = tempDir('mpp-interrupt-');
  const r = startRun(dir);
  assert.equal(await r.exited, 0, r.stderr());
  assert.match(r.stderr(), /naming the profile… \(Ctrl-C keeps the raw profile instead\)/);
  assert.ok(existsSync(join(dir, 'p.pb.gz')));
  assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith('.raw.pb')), []);
});
