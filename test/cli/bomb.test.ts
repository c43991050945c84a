/**
 * The decompression guard: a gzip input that inflates past the 1 GiB limit is refused with
 * one line, having held about one chunk of it, not the limit's worth. Measured as the peak
 * RSS of a child process; the control decompresses the same input with the one-shot bounded
 * gunzip (at a 300 MiB limit), which does hold the limit, so the measure can tell them apart.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { gzipSync } from 'node:zlib';

import { root, tempDir } from '../helpers.js';

let dir: string;
let bomb: string;

before(() => {
  dir = tempDir('mpp-bomb-');
  bomb = join(dir, 'bomb.pb.gz');
  // 80 gzip members of 16 MiB of zeros each: 1.25 GiB from 1.3 MB (a multi-member file, so
  // the last member's size field says only 16 MiB)
  const member = gzipSync(Buffer.alloc(16 << 20), { level: 9 });
  writeFileSync(bomb, Buffer.concat(Array.from({ length: 80 }, () => member)));
});

after(() => rmSync(dir, { recursive: true, force: true }));

const MiB = 1 << 20;

/** Runs `body` (ESM) in a child; returns its exit status, output and peak RSS in bytes. */
function child(body: string): { status: number | null; out: string; err: string; maxRss: number } {
  const script = `${body}\nprocess.stderr.write('maxrss=' + process.resourceUsage().maxRSS * 1024 + '\\n');`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 120_000 });
  const maxRss = Number(/maxrss=(\d+)/.exec(r.stderr)?.[1] ?? NaN);
  return { status: r.status, out: r.stdout, err: r.stderr.replace(/maxrss=\d+\n/, ''), maxRss };
}

test('top on a 1.25 GiB gzip bomb: one line, exit 2, without holding the limit', () => {
  const main = JSON.stringify(join(root, 'dist', 'src', 'cli', 'main.js'));
  const r = child(`import { main } from ${main}; process.exitCode = await main(['top', ${JSON.stringify(bomb)}]);`);
  assert.equal(r.status, 2, r.err);
  assert.equal(r.err, `mimalloc-pprof: ${bomb}: decompresses to more than 1 GiB, beyond this tool's limit\n`);
  assert.ok(r.maxRss < 200 * MiB, `peak RSS ${Math.round(r.maxRss / MiB)} MiB`);

  // control: the one-shot bounded gunzip holds its limit before refusing
  const parse = JSON.stringify(join(root, 'dist', 'src', 'profile', 'parse.js'));
  const c = child(`import { readFileSync } from 'node:fs'; import { parseProfile } from ${parse};
    try { parseProfile(readFileSync(${JSON.stringify(bomb)}), 'bomb', { maxBytes: ${300 * MiB} }); } catch (e) { console.log(e.message); }`);
  assert.match(c.out, /decompresses to more than 300 MiB/);
  assert.ok(c.maxRss > 300 * MiB, `control peak RSS ${Math.round(c.maxRss / MiB)} MiB`);
});
