/**
 * `run` keeps the unwind rules a run met for the next one (native/src/rulefile.c): it points the
 * preload at `<cache folder>/unwind` (MIMALLOC_PPROF_CACHE_DIR, else XDG's), made 0700, and a
 * Node program's exit leaves a file there for node's build id; a second run of the same program
 * leaves it in place, about as large or larger (a run may evict a few rules the first kept). With MIMALLOC_PPROF_CACHE_DIR=off nothing is kept (the
 * control that the files come from run's setting, not from elsewhere).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root, tempDir } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const program = "const keep = []; for (let i = 0; i < 256; i++) keep.push(Buffer.alloc(65536, i)); globalThis.keep = keep;";

/** node's build id, as rulefile.c names its file. */
function nodeBuildId(): string {
  const r = spawnSync('readelf', ['-n', process.execPath], { encoding: 'utf8' });
  const id = /Build ID: ([0-9a-f]+)/.exec(r.stdout)?.[1];
  assert.ok(id, `no build id in ${process.execPath}: ${r.stderr}`);
  return id;
}

function run(dir: string, env: Record<string, string>) {
  const r = spawnSync(process.execPath, [cli, 'run', '--top', '0', '--out', join(dir, 'p.pb.gz'), '--', process.execPath, '-e', program], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  return r;
}

test("run keeps node's unwind rules in the cache folder for the next run", () => {
  const dir = tempDir('mpp-unwind-cache-');
  const cache = join(dir, 'cache');
  run(dir, { MIMALLOC_PPROF_CACHE_DIR: cache });
  const folder = join(cache, 'unwind');
  assert.equal(statSync(folder).mode & 0o777, 0o700);
  const file = join(folder, `${nodeBuildId()}.rules`);
  assert.ok(existsSync(file), `no ${file}: ${readdirSync(folder).join(', ')}`);
  const first = readFileSync(file).readUInt32LE(12);
  assert.ok(first > 10, `${first} rules kept`);
  run(dir, { MIMALLOC_PPROF_CACHE_DIR: cache });
  const second = readFileSync(file).readUInt32LE(12);
  assert.ok(second >= first * 0.9, `${second} rules after the second run, ${first} after the first`);
  assert.equal(statSync(file).mode & 0o777, 0o600);
});

test('control: MIMALLOC_PPROF_CACHE_DIR=off keeps nothing', () => {
  const dir = tempDir('mpp-unwind-cache-');
  const off = join(dir, 'home');
  run(dir, { MIMALLOC_PPROF_CACHE_DIR: 'off', XDG_CACHE_HOME: off, HOME: off });
  assert.ok(!existsSync(off), 'something was kept with the cache folder off');
  assert.deepEqual(readdirSync(dir).filter((f) => f !== 'p.pb.gz'), [], 'something was kept beside the profile');
});
