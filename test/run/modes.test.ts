/**
 * What `run` writes is the user's alone: the profile and the HTML report are 0600 under a
 * umask that would let others read them (a file the same shell creates is 0644: the control
 * that the umask is not what narrows them), the test build's MIMALLOC_PPROF_TEST_OPEN_MODES=1
 * (files written 0644) is caught, and `--no-cmdline` leaves a secret argument out of both, and
 * out of the table of processes run prints (a CI log keeps it).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { test } from 'node:test';

import { root, tempDir } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');
// with a child, so that run prints its table of processes and their command lines
const program =
  "const keep = []; for (let i = 0; i < 64; i++) keep.push(Buffer.alloc(65536, i)); globalThis.keep = keep; require('node:child_process').execFileSync(process.execPath, ['-e', '0', '--', '--token=swordfish']);";

/** The report's data (gzipped JSON in base64 inside the page), as text. */
function reportData(html: string): string {
  const packed = /<script id="report-data"[^>]*>([^<]*)<\/script>/.exec(html)?.[1];
  assert.ok(packed, 'the report carries its data');
  return gunzipSync(Buffer.from(packed, 'base64')).toString('utf8');
}

/** `run --html` under umask 022 in a shell that also creates `control`; the modes and texts. */
function runUnderUmask(extra: string[], env: Record<string, string> = {}) {
  const dir = tempDir('mpp-modes-');
  const out = join(dir, 'p.pb.gz');
  const args = [cli, 'run', '--html', '--top', '0', ...extra, '--out', out, '--', process.execPath, '-e', program, '--', '--password=hunter2'];
  const quoted = args.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const r = spawnSync('sh', ['-c', `umask 022; touch control; exec '${process.execPath}' ${quoted}`], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const mode = (f: string) => statSync(join(dir, f)).mode & 0o777;
  return {
    control: mode('control'),
    profile: mode('p.pb.gz'),
    html: mode('p.html'),
    profileText: gunzipSync(readFileSync(out)).toString('latin1'),
    htmlText: reportData(readFileSync(join(dir, 'p.html'), 'utf8')),
    stderr: r.stderr,
  };
}

test('run writes its profile and report 0600 under umask 022; the command line is in them unless --no-cmdline', () => {
  const plain = runUnderUmask([]);
  assert.equal(plain.control.toString(8), '644'); // the umask lets others read what is not narrowed
  assert.equal(plain.profile.toString(8), '600');
  assert.equal(plain.html.toString(8), '600');
  assert.match(plain.profileText, /--password=hunter2/);
  assert.match(plain.htmlText, /--password=hunter2/);
  assert.match(plain.stderr, /^[ *m] .* -e 0 -- --token=swordfish$/m, 'the table of processes: the child\'s command line (the main one\'s is cut at 100 characters)');

  const hidden = runUnderUmask(['--no-cmdline']);
  assert.equal(hidden.profile.toString(8), '600');
  assert.doesNotMatch(hidden.profileText, /hunter2/);
  assert.doesNotMatch(hidden.htmlText, /hunter2/);
  assert.match(hidden.stderr, /2 processes/);
  assert.doesNotMatch(hidden.stderr, /hunter2|swordfish/, 'nor in what run prints');
});

test('positive control: files written 0644 (MIMALLOC_PPROF_TEST_OPEN_MODES=1) are caught', () => {
  const open = runUnderUmask([], { MIMALLOC_PPROF_TEST_OPEN_MODES: '1' });
  assert.notEqual(open.profile.toString(8), '600');
  assert.notEqual(open.html.toString(8), '600');
});
