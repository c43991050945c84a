/**
 * run's profile file and its format agree: --out's extension picks the format (as convert's
 * does), --format the default name, and a name of the other format is refused (exit 2), where
 * `--format text` once wrote text into mimalloc-pprof.pb.gz and `--out y.heap` gzipped proto.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { parseRunArgs } from '../../src/cli/run.js';
import { UsageError } from '../../src/errors.js';
import { root, tempDir } from '../helpers.js';

const parsed = (...args: string[]) => {
  const o = parseRunArgs([...args, '--', 'true']);
  assert.notEqual(o, 'help');
  return o === 'help' ? undefined : { out: o.out, format: o.format };
};

test('run: the format follows --out, the default name follows --format', () => {
  assert.deepEqual(parsed(), { out: 'mimalloc-pprof.pb.gz', format: 'proto' });
  assert.deepEqual(parsed('--format', 'text'), { out: 'mimalloc-pprof.heap', format: 'text' });
  assert.deepEqual(parsed('--out', 'y.heap'), { out: 'y.heap', format: 'text' });
  assert.deepEqual(parsed('--out', 'y.TXT'), { out: 'y.TXT', format: 'text' });
  assert.deepEqual(parsed('--out', 'y.pprof'), { out: 'y.pprof', format: 'proto' });
  assert.deepEqual(parsed('--out', 'y.pb.gz', '--format', 'proto'), { out: 'y.pb.gz', format: 'proto' });
  assert.deepEqual(parsed('--out', 'y.heap', '--format', 'text'), { out: 'y.heap', format: 'text' });
  // a name that says nothing keeps what was asked
  assert.deepEqual(parsed('--out', 'profile', '--format', 'text'), { out: 'profile', format: 'text' });
  assert.deepEqual(parsed('--out', 'profile'), { out: 'profile', format: 'proto' });
  assert.throws(() => parsed('--format', 'text', '--out', 'p.pb.gz'), (e: unknown) => e instanceof UsageError && /--out p\.pb\.gz names a profile\.proto/.test(e.message));
  assert.throws(() => parsed('--out', 'p.heap', '--format', 'proto'), (e: unknown) => e instanceof UsageError && /names heap_v2 text/.test(e.message));
});

test('run --format text writes text, to mimalloc-pprof.heap; a mismatched --out exits 2 with one line', () => {
  const dir = tempDir('mpp-run-args-');
  const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
  const r = spawnSync(process.execPath, [cli, 'run', '--format', 'text', '--top', '0', '--', process.execPath, '-e', 'globalThis.k = Buffer.alloc(1 << 20, 1)'], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /wrote \S*mimalloc-pprof\.heap\n/);
  assert.match(readFileSync(join(dir, 'mimalloc-pprof.heap'), 'latin1'), /^heap profile: /, 'heap_v2 text, not a gzipped proto');
  const bad = spawnSync(process.execPath, [cli, 'run', '--format', 'text', '--out', 'x.pb.gz', '--', 'true'], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
  assert.equal(bad.status, 2);
  assert.equal(bad.stderr.trim().split('\n').length, 1, bad.stderr);
});
