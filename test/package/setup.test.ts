/**
 * The install script where the system libmimalloc is missing (simulated with a compiler that
 * fails the probe) and no prebuilt package is used (MIMALLOC_PPROF_BUILD_FROM_SOURCE=1): only
 * with MIMALLOC_PPROF_APT=1, as root on Debian/Ubuntu with apt-get, it says in one line what it
 * installs, then runs apt-get (a stand-in that records its arguments); MIMALLOC_PPROF_APT=0, or
 * no apt-get, stops with the package to install and runs nothing. (Without the variable, the
 * packed package runs nothing either: test/package/install.test.ts.)
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { root, tempDir } from '../helpers.js';

let bin: string;
let log: string;

before(() => {
  bin = tempDir('mpp-setup-');
  log = join(bin, 'apt-get.log');
  writeFileSync(join(bin, 'apt-get'), `#!/bin/sh\necho "$@" >> "${log}"\nexit 1\n`);
  chmodSync(join(bin, 'apt-get'), 0o755);
});

after(() => rmSync(bin, { recursive: true, force: true }));

function setup(env: Record<string, string>) {
  rmSync(log, { force: true });
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_')));
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'setup.mjs')], { encoding: 'utf8', env: { ...base, CC: '/bin/false', MIMALLOC_PPROF_BUILD_FROM_SOURCE: '1', ...env }, timeout: 60_000 });
  return { status: r.status, stderr: r.stderr, apt: existsSync(log) ? readFileSync(log, 'utf8') : '' };
}

const debianLike = (() => {
  try {
    return /^(ID|ID_LIKE)=.*(debian|ubuntu)/m.test(readFileSync('/etc/os-release', 'utf8'));
  } catch {
    return false;
  }
})();

test('MIMALLOC_PPROF_APT=1 as root on Debian with apt-get: one line saying what, then apt-get', (t) => {
  if (!debianLike || process.getuid?.() !== 0) return t.skip('needs root on Debian or Ubuntu');
  const r = setup({ PATH: `${bin}:${process.env.PATH ?? ''}`, MIMALLOC_PPROF_APT: '1' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /^mimalloc-pprof: installing libmimalloc-dev with apt-get \(apt-get update; apt-get install libmimalloc-dev\), as MIMALLOC_PPROF_APT=1 asks$/m);
  assert.equal(r.apt, 'update -qq\n'); // the stand-in fails, so install is not tried
  assert.match(r.stderr, /apt-get update failed \(exit 1\); no prebuilt package fits [\w-]+, and the system libmimalloc \(2\.x or 3\.x\) with its headers is missing: install libmimalloc-dev/);
});

test('MIMALLOC_PPROF_APT=0, or no apt-get: nothing installed, one line naming the package', () => {
  const refused = setup({ PATH: `${bin}:${process.env.PATH ?? ''}`, MIMALLOC_PPROF_APT: '0' });
  assert.equal(refused.status, 1);
  assert.equal(refused.apt, '');
  assert.equal(refused.stderr.trim().split('\n').length, 1, refused.stderr);
  assert.match(refused.stderr, /is missing: install .* \(MIMALLOC_PPROF_APT=0: not using apt-get\)$/m);

  const noApt = setup({ PATH: tempDir('mpp-empty-path-') });
  assert.equal(noApt.status, 1);
  assert.equal(noApt.apt, '');
  assert.match(noApt.stderr, /^mimalloc-pprof: no prebuilt package fits [\w-]+, and the system libmimalloc \(2\.x or 3\.x\) with its headers is missing: install /);
});

// On macOS and Windows the install succeeds without building anything, in one line: a team
// reads there the profiles its Linux servers took (docs/platforms.md). The platform is faked
// with a preloaded script; the control is the same install on this Linux, which fails.
test('on macOS or Windows: the install says in one line that profiles are read, not taken, and succeeds', () => {
  const fake = join(bin, 'platform.cjs');
  for (const platform of ['darwin', 'win32']) {
    writeFileSync(fake, `Object.defineProperty(process, 'platform', { value: ${JSON.stringify(platform)} });\n`);
    const r = setup({ PATH: tempDir('mpp-empty-path-'), NODE_OPTIONS: `--require=${fake}` });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`^mimalloc-pprof: the preload library needs Linux \\(LD_PRELOAD\\); this system is ${platform}: profiles can be read here`));
  }
  const control = setup({ PATH: tempDir('mpp-empty-path-') });
  assert.equal(control.status, 1, 'the Linux install without mimalloc must fail (the control)');
});
