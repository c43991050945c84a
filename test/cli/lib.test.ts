import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
const runCli = (args: string[], env: NodeJS.ProcessEnv = process.env) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', env });

test('lib prints the absolute path of the preload library, which ld.so loads', () => {
  const r = runCli(['lib']);
  assert.equal(r.status, 0, r.stderr);
  const path = r.stdout.trim();
  assert.ok(isAbsolute(path) && existsSync(path));
  const probe = spawnSync('true', [], { env: { ...process.env, LD_PRELOAD: path, MIMALLOC_PROF_VERBOSE: '1' }, encoding: 'utf8' });
  assert.match(probe.stderr, /^mimalloc-pprof: mimalloc \d+\.\d+\.\d+ .*interposer active/);
});

test('lib with a missing override names the problem and exits 2', () => {
  const r = runCli(['lib'], { ...process.env, MIMALLOC_PPROF_LIB: '/nonexistent/libx.so' });
  assert.equal(r.status, 2);
  assert.equal(r.stderr.trim().split('\n').length, 1);
  assert.match(r.stderr, /MIMALLOC_PPROF_LIB points at \/nonexistent\/libx.so/);
});

test('unknown commands and arguments are usage errors (exit 2, one line)', () => {
  for (const args of [['frobnicate'], ['lib', 'extra']]) {
    const r = runCli(args);
    assert.equal(r.status, 2);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  }
  assert.equal(runCli(['--help']).status, 0);
  assert.equal(runCli(['lib', '--help']).status, 0);
});
