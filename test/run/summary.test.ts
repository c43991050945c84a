/**
 * What `run`'s closing summary explains: how much the collection before the exit profile
 * freed (a module-scope array of a script that has ended: 50 MiB of Buffers) with the
 * options that show it (control: --no-gc, where the profile holds it and no such line is
 * printed); and `npx NAME`/`npm exec` followed to the program they start (npm's own process,
 * which used more, is not the one detailed).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { followLauncher, isLauncher } from '../../src/run/index.js';
import { root, tempDir } from '../helpers.js';

const cli = join(root, 'dist', 'src', 'cli', 'bin.js');

function mpp(args: string[], cwd: string) {
  return spawnSync(process.execPath, [cli, ...args], { cwd, encoding: 'utf8', timeout: 120_000, maxBuffer: 64 << 20 });
}

const MIB = 1 << 20;
const mib = (s: string) => {
  const m = /^([\d.]+)(B|KiB|MiB|GiB)$/.exec(s);
  assert.ok(m, s);
  return Number(m[1]) * { B: 1, KiB: 1024, MiB: MIB, GiB: 1024 * MIB }[m[2] as 'B'];
};

test('the exit summary says what the collection before the profile freed, and points at --no-gc / --peak', () => {
  const dir = tempDir('mpp-summary-');
  writeFileSync(join(dir, 'scope.js'), 'const a = []; for (let i = 0; i < 50; i++) a.push(Buffer.alloc(1 << 20, 1));\n');
  // 64 KiB sampling: each 1 MiB block is sampled with p = 1 - exp(-16), the estimate exact to < 1 %
  const r = mpp(['run', '--interval', '64k', '--out', 'p.pb.gz', '--', process.execPath, 'scope.js'], dir);
  assert.equal(r.status, 0, r.stderr);
  const m = /the garbage collection before this profile freed (\S+) of native memory \(estimated\) and (\S+) of JavaScript heap: .*--no-gc .* --peak/.exec(r.stderr);
  assert.ok(m, r.stderr);
  const freed = mib(m[1]!);
  // the freed figure is the difference of two estimates of everything in use: the 50 blocks, less
  // what the program allocated between the two (a few hundred KiB), printed to 3 digits
  assert.ok(freed >= 49.5 * MIB && freed < 56 * MIB, `${m[1]} freed (50 MiB of Buffers)`);

  // control: --no-gc keeps them in the profile and says nothing of a collection
  const kept = mpp(['run', '--no-gc', '--interval', '64k', '--out', 'q.pb.gz', '--', process.execPath, 'scope.js'], dir);
  assert.equal(kept.status, 0, kept.stderr);
  assert.doesNotMatch(kept.stderr, /garbage collection before this profile freed/);
  const total = /^Total: (\S+);/m.exec(kept.stderr)?.[1];
  assert.ok(total && mib(total) >= 50 * MIB, `in use with --no-gc: ${total}`);
});

test('followLauncher: npx NAME / npm exec NAME resolve to node_modules/.bin/NAME; what npm must do itself is left to it', () => {
  const dir = tempDir('mpp-npx-');
  const bin = join(dir, 'node_modules', '.bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, 'tool'), '#!/bin/sh\n');
  chmodSync(join(bin, 'tool'), 0o755);
  const below = join(dir, 'src', 'deep');
  mkdirSync(below, { recursive: true });
  const tool = join(bin, 'tool');
  assert.deepEqual(followLauncher(['npx', 'tool', 'a', '-b'], dir)?.command, [tool, 'a', '-b']);
  assert.deepEqual(followLauncher(['/usr/bin/npx', '--yes', 'tool'], below)?.command, [tool]);
  assert.deepEqual(followLauncher(['npm', 'exec', '--', 'tool', 'x'], dir)?.command, [tool, 'x']);
  // controls: a package to fetch, --package, --call, another command, an unknown name
  for (const command of [['npx', 'tool@1'], ['npx', '-p', 'x', 'tool'], ['npm', 'exec', '-c', 'tool'], ['npm', 'run', 'tool'], ['node', 'tool'], ['npx', 'other']]) {
    assert.equal(followLauncher(command, dir), undefined, command.join(' '));
  }
});

test('isLauncher: npm, npx, shells are launchers; the program they start is not', () => {
  for (const argv of [
    ['node', '/usr/bin/npm', 'exec', '-c', 'node child.js'],
    ['/usr/bin/node', '/usr/lib/node_modules/npm/bin/npx-cli.js', 'deno'],
    ['node', '/home/u/.nvm/versions/node/v22/lib/node_modules/npm/bin/npm-cli.js', 'run', 'x'],
    ['sh', '-c', 'node child.js'],
    ['npx', 'tsc'],
  ]) {
    assert.equal(isLauncher(argv), true, argv.join(' '));
  }
  for (const argv of [['node', 'child.js'], ['/x/deno', 'run', 'app.ts'], ['node', '/p/node_modules/typescript/bin/tsc'], ['python3', 'npm.py']]) {
    assert.equal(isLauncher(argv), false, argv.join(' '));
  }
});

test('run -- npm exec -c "node child.js": the child program is detailed, not npm (which used more)', () => {
  const dir = tempDir('mpp-npm-exec-');
  writeFileSync(join(dir, 'child.js'), 'globalThis.k = []; for (let i = 0; i < 8; i++) globalThis.k.push(Buffer.alloc(1 << 20, 1));\n');
  const r = mpp(['run', '--top', '3', '--out', 'n.pb.gz', '--', 'npm', 'exec', '--offline', '-c', 'node child.js'], dir);
  assert.equal(r.status, 0, r.stderr);
  const rows = r.stderr.split('\n').filter((l) => /^[*m ]\s+\d+\s+\d+\s+\S+\s+/.test(l));
  const npm = rows.find((l) => /npm exec/.test(l));
  const child = rows.find((l) => /\s{2}node child\.js$/.test(l));
  assert.ok(npm && child, r.stderr);
  assert.ok(child.startsWith('*'), `the child is detailed: ${r.stderr}`);
  // control: by the heaviest-process rule alone npm would have been (it used more)
  const peak = (l: string) => mib(l.trim().split(/\s+/)[3]!);
  assert.ok(peak(npm) > peak(child), `${npm}\n${child}`);
});

test('run -- npx deno run app.ts: run starts node_modules/.bin/deno itself and names its JavaScript', (t) => {
  const dir = tempDir('mpp-npx-deno-');
  const deno = join(root, 'node_modules', '.bin', 'deno');
  mkdirSync(join(dir, 'node_modules', '.bin'), { recursive: true });
  try {
    symlinkSync(deno, join(dir, 'node_modules', '.bin', 'deno'));
  } catch {
    return t.skip('no deno in node_modules');
  }
  writeFileSync(join(dir, 'app.ts'), 'const keep: Uint8Array[] = [];\nfunction hold(n: number) { for (let i = 0; i < n; i++) keep.push(new Uint8Array(1 << 20).fill(1)); }\nhold(40);\n(globalThis as any).keep = keep;\n');
  const r = mpp(['run', '--out', 'd.pb.gz', '--', 'npx', 'deno', 'run', 'app.ts'], dir);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /npx deno: started \S+\/node_modules\/\.bin\/deno directly/);
  assert.match(r.stderr, /in-use memory of deno \(pid \d+\)/);
  assert.match(r.stderr, /\d+(\.\d+)?MiB\s+[\d.]+%\s+hold \S*app\.ts:2/);
});
