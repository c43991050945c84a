/** The dispatcher: help, version, unknown commands, the command table. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';
import { profileFixtures } from '../profile/util.js';
import { cli, isOneLineError } from './util.js';

test('mimalloc-pprof --help lists every command', async () => {
  const r = await cli(['--help']);
  assert.equal(r.status, 0);
  for (const name of ['lib', 'run', 'top', 'diff', 'convert']) assert.match(r.stdout, new RegExp(`^  ${name} +\\S`, 'm'));
  const bare = await cli([]);
  assert.equal(bare.status, 2);
  assert.equal(bare.stdout, r.stdout);
});

test('mimalloc-pprof --version', async () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
  assert.deepEqual(await cli(['-v']), { status: 0, stdout: `${pkg.version}\n`, stderr: '' });
});

test('mimalloc-pprof frobnicate', async () => {
  const r = await cli(['frobnicate']);
  assert.ok(isOneLineError(r));
  assert.equal(r.stderr, "mimalloc-pprof: unknown command 'frobnicate' (see mimalloc-pprof --help)\n");
  assert.ok(isOneLineError(await cli(['toString'])), 'no prototype keys as commands');
});

test('mimalloc-pprof run --help is dispatched to run', async () => {
  const r = spawnSync(process.execPath, [join(root, 'dist', 'src', 'cli', 'bin.js'), 'run', '--help'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^Usage: mimalloc-pprof run/);
});

test('the installed bin: top through a closed pipe exits quietly', () => {
  const bin = join(root, 'dist', 'src', 'cli', 'bin.js');
  const r = spawnSync('sh', ['-c', `"${process.execPath}" "${bin}" top "${join(profileFixtures, 'ls-accum.pb')}" | head -c 1`], { encoding: 'utf8' });
  assert.equal(r.status, 0);
  assert.equal(r.stdout, 'T');
  assert.equal(r.stderr, '');
});
