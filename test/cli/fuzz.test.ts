/**
 * A sample of the fuzz corpus through the real CLI (bin.js in a child process): every
 * rejected input makes `top`, `diff` and `convert` exit 2 with exactly one line on stderr,
 * no stack trace, within a timeout; nothing is written by a failed convert.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { parseProfile } from '../../src/profile/parse.js';
import { root, tempDir } from '../helpers.js';
import { corpus } from '../profile/corpus.js';
import { profileFixtures } from '../profile/util.js';

const bin = join(root, 'dist', 'src', 'cli', 'bin.js');
const SAMPLE = 36;

test(`${SAMPLE} rejected fuzz inputs through top, diff and convert: exit 2, one line, no stack, no hang`, () => {
  const dir = tempDir('mpp-fuzz-cli-');
  // rejected inputs, spread over the corpus (every kind of damage, not the first few)
  const rejected: { kind: string; file: string }[] = [];
  let i = 0;
  for (const input of corpus(3000, 777)) {
    i++;
    if (i % 41 !== 0 || rejected.length >= SAMPLE) continue;
    try {
      parseProfile(input.data, 'x');
    } catch {
      const ext = ['.pb.gz', '.heap', '.pb', ''][rejected.length % 4]!;
      const file = join(dir, `in${rejected.length}${ext}`);
      writeFileSync(file, input.data);
      rejected.push({ kind: input.kind, file });
    }
  }
  assert.equal(rejected.length, SAMPLE);
  const good = join(profileFixtures, 'ls-accum.pb');
  rejected.forEach(({ kind, file }, k) => {
    const out = join(dir, `out${k}.pb.gz`);
    const argv = [['top', file], ['diff', good, file], ['diff', file, good], ['convert', file, out]][k % 4]!;
    const t0 = performance.now();
    const r = spawnSync(process.execPath, [bin, ...argv], { encoding: 'utf8', timeout: 30_000 });
    const what = `${kind}: mimalloc-pprof ${argv.join(' ')} (${(performance.now() - t0).toFixed(0)} ms)`;
    assert.equal(r.signal, null, `${what} timed out`);
    assert.equal(r.status, 2, `${what}: ${r.stderr}`);
    assert.equal(r.stdout, '', what);
    assert.match(r.stderr, /^mimalloc-pprof: [^\n]+\n$/, what);
    assert.doesNotMatch(r.stderr, /\bat .*:\d+:\d+|internal error/, what);
    assert.ok(r.stderr.includes(file), `${what}: the message names the file`);
    assert.ok(!existsSync(out), `${what}: no output file`);
  });
});
