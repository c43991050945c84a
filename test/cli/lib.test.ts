import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { test } from 'node:test';

import { removedAtExit, root } from '../helpers.js';

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

test('under a path with a space, lib prints a link that LD_PRELOAD="$(lib)" loads (control: the spaced path itself is refused by ld.so)', () => {
  const dir = removedAtExit(mkdtempSync(join(tmpdir(), 'mpp lib ')));
  const real = runCli(['lib']).stdout.trim();
  const spaced = join(dir, 'with space');
  symlinkSync(dirname(real), spaced);
  const lib = join(spaced, basename(real));
  const env = { ...process.env, MIMALLOC_PPROF_LIB: lib, XDG_RUNTIME_DIR: join(dir, 'no such folder') };
  const r = runCli(['lib'], env);
  assert.equal(r.status, 0, r.stderr);
  const printed = r.stdout.trim();
  assert.doesNotMatch(printed, /[\s:]/);
  assert.equal(r.stderr, '', 'no warning: the link is usable');
  // the README's recipe, through a shell, as a user types it
  const recipe = (path: string) => spawnSync('sh', ['-c', 'LD_PRELOAD="$P" MIMALLOC_PROF_VERBOSE=1 env true'], { env: { ...process.env, P: path }, encoding: 'utf8' });
  const ok = recipe(printed);
  assert.match(ok.stderr, /^mimalloc-pprof: mimalloc \d+\.\d+\.\d+ .*interposer active/, ok.stderr);
  const control = recipe(lib);
  assert.match(control.stderr, /cannot be preloaded/);
  assert.doesNotMatch(control.stderr, /interposer active/);
});
