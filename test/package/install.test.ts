/**
 * Installed as a user would install the published packages: the main tarball and this
 * platform's prebuilt package (scripts/prebuild.mjs packs both into build/packages) into a
 * fresh app, offline (the package's two dependencies packed from node_modules, every name
 * pinned to a local tarball with `overrides`), as the unprivileged user nobody, with HOME and
 * npm's cache in the app, and with a PATH that holds node, npm and npx and a stand-in apt-get
 * that records any call, but no C compiler and no make. Then `npx mimalloc-pprof run -- node
 * app.js` names the app's JavaScript function in the profile, the library reports mimalloc
 * linked in statically, and no libmimalloc is mapped in the profiled process.
 *
 * Also: every shipped binary needs no libmimalloc (readelf's NEEDED, what ldd lists first);
 * controls: the from-source build (linked to the system's libmimalloc) is caught by the same
 * check, and an install whose prebuilt package is missing fails with the one line that names
 * what to do (no compiler there) without calling apt-get; the loader refuses a prebuilt
 * package that needs a newer glibc than the system's.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';

import { prebuiltPackage } from '../../src/preload/library.js';
import { root, tempDir } from '../helpers.js';

const NOBODY = 65534;
const platform = 'linux-x64';
const packages = join(root, 'build', 'packages');
const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;
const canRun = process.platform === 'linux' && process.arch === 'x64' && process.getuid?.() === 0 && existsSync('/usr/bin/setpriv');

let work: string;
let bin: string;
let aptLog: string;

/** The NEEDED entries of an ELF file (the libraries ldd resolves). */
function needed(file: string): string[] {
  const out = execFileSync('readelf', ['-d', '-W', file], { encoding: 'utf8' });
  return [...out.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]!);
}

/** The shipped-binary check: nothing of them needs a libmimalloc (ldd would list it). */
function mimallocNeeds(files: string[]): string[] {
  return files.flatMap((f) => needed(f).filter((n) => /^libmimalloc\.so/.test(n)).map((n) => `${f}: ${n}`));
}

function asNobody(args: string[], cwd: string, extraEnv: Record<string, string> = {}) {
  const env = {
    PATH: bin,
    HOME: join(work, 'home'),
    npm_config_cache: join(work, 'home', '.npm'),
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
    npm_config_audit: 'false',
    ...extraEnv,
  };
  const r = spawnSync('/usr/bin/setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', '--', ...args], { cwd, env, encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, all: `${r.stdout}\n${r.stderr}`, stdout: r.stdout, stderr: r.stderr };
}

function appWith(name: string, overrides: Record<string, string>): string {
  const app = join(work, name);
  mkdirSync(app);
  for (const f of readdirSync(join(work, 'tgz'))) copyFileSync(join(work, 'tgz', f), join(app, f));
  writeFileSync(
    join(app, 'package.json'),
    JSON.stringify({ name, version: '1.0.0', private: true, dependencies: { 'mimalloc-pprof': `file:./mimalloc-pprof-${version}.tgz` }, overrides }),
  );
  writeFileSync(
    join(app, 'app.js'),
    [
      "const fs = require('node:fs');",
      'const kept = [];',
      'function growTheCacheForTheInstallTest() { for (let i = 0; i < 400; i++) kept.push(Buffer.alloc(64 * 1024, 1)); }',
      'growTheCacheForTheInstallTest();',
      "const maps = fs.readFileSync('/proc/self/maps', 'utf8');",
      "console.log('libmimalloc mapped:', /libmimalloc\\.so/.test(maps), kept.length);",
    ].join('\n'),
  );
  execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, app]);
  return app;
}

before(() => {
  if (!canRun) return;
  const tarball = (p: string) => join(packages, p);
  if (!existsSync(tarball(`mimalloc-pprof-${platform}-${version}.tgz`)) || !existsSync(tarball(`mimalloc-pprof-${version}.tgz`))) {
    execFileSync(process.execPath, [join(root, 'scripts', 'prebuild.mjs'), '--target', platform], { stdio: ['ignore', 'ignore', 'inherit'] });
  }
  work = tempDir('mpp-install-');
  chmodSync(work, 0o755);
  mkdirSync(join(work, 'tgz'));
  for (const f of [`mimalloc-pprof-${version}.tgz`, `mimalloc-pprof-${platform}-${version}.tgz`]) copyFileSync(tarball(f), join(work, 'tgz', f));
  // the main package's dependencies, packed from node_modules: no registry needed
  for (const dep of ['pprof-format', 'gecko-profiler-demangle']) {
    execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', join(work, 'tgz'), join(root, 'node_modules', dep)], { stdio: 'ignore' });
  }
  // PATH: node, npm, npx, sh and a recording apt-get; no cc, gcc or make
  bin = join(work, 'bin');
  mkdirSync(bin);
  symlinkSync(process.execPath, join(bin, 'node'));
  symlinkSync('/bin/sh', join(bin, 'sh')); // npm runs install scripts with sh
  const npmCli = join(dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'bin');
  symlinkSync(join(npmCli, 'npm-cli.js'), join(bin, 'npm'));
  symlinkSync(join(npmCli, 'npx-cli.js'), join(bin, 'npx'));
  mkdirSync(join(work, 'home'));
  aptLog = join(work, 'home', 'apt-get.log'); // written as nobody
  writeFileSync(join(bin, 'apt-get'), `#!/bin/sh\necho "$@" >> "${aptLog}"\nexit 1\n`);
  chmodSync(join(bin, 'apt-get'), 0o755);
  execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, join(work, 'home')]);
});

after(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

const tgz = (name: string) => {
  const f = readdirSync(join(work, 'tgz')).find((x) => x.startsWith(`${name}-`) && /^\d/.test(x.slice(name.length + 1)));
  assert.ok(f, `no tarball of ${name}`);
  return `file:./${f}`;
};

test('prebuilt: installed offline as nobody without a compiler, `npx mimalloc-pprof run` names the JavaScript function; no libmimalloc needed or mapped', (t) => {
  if (!canRun) return t.skip('needs root (to run as nobody) on linux-x64 with setpriv');
  for (const tool of ['cc', 'gcc', 'make']) {
    assert.notEqual(asNobody(['sh', '-c', `command -v ${tool}`], work).status, 0, `${tool} is on the test's PATH`);
  }
  const app = appWith('app', {
    [`@mimalloc-pprof/${platform}`]: tgz(`mimalloc-pprof-${platform}`),
    'pprof-format': tgz('pprof-format'),
    'gecko-profiler-demangle': tgz('gecko-profiler-demangle'),
  });
  const started = Date.now();
  const install = asNobody(['npm', 'install', '--offline', '--no-package-lock'], app);
  t.diagnostic(`npm install: ${Date.now() - started} ms`);
  assert.equal(install.status, 0, install.all);
  assert.equal(existsSync(aptLog) ? readFileSync(aptLog, 'utf8') : '', '', 'the install called apt-get');
  const installed = join(app, 'node_modules', '@mimalloc-pprof', platform);
  assert.ok(!existsSync(join(app, 'node_modules', 'mimalloc-pprof', 'build', 'libmimalloc-pprof.so')), 'the install built the library');
  const shipped = ['libmimalloc-pprof.so', 'mimalloc_pprof.node', 'mpp-rusage'].map((f) => join(installed, f));
  assert.deepEqual(mimallocNeeds(shipped), []);

  const run = asNobody(['npx', 'mimalloc-pprof', 'run', '--out', 'app.pb.gz', '--', 'node', 'app.js'], app);
  assert.equal(run.status, 0, run.all);
  assert.match(run.all, /libmimalloc mapped: false 400/);
  const lib = asNobody(['npx', 'mimalloc-pprof', 'lib'], app).stdout.trim();
  assert.equal(lib, join(installed, 'libmimalloc-pprof.so'));
  const verbose = asNobody(['node', '-e', '0'], app, { LD_PRELOAD: lib, MIMALLOC_PROF_VERBOSE: '1' });
  assert.match(verbose.stderr, /^mimalloc-pprof: mimalloc \d+\.\d+\.\d+ \(built against [\d.]+, linked in statically\)/m);
  const top = asNobody(['npx', 'mimalloc-pprof', 'top', 'app.pb.gz', '-n', '1000', '--sample-index', 'alloc_space'], app);
  assert.equal(top.status, 0, top.all);
  assert.match(top.stdout, /growTheCacheForTheInstallTest/);
  t.diagnostic(`install and run: ${Date.now() - started} ms`);
  // the control of the apt-get record: the explicit opt-in is what reaches it
  const optIn = asNobody(['node', join(app, 'node_modules', 'mimalloc-pprof', 'scripts', 'setup.mjs')], app, { MIMALLOC_PPROF_APT: '1', MIMALLOC_PPROF_BUILD_FROM_SOURCE: '1' });
  assert.notEqual(optIn.status, 0, optIn.all);
  assert.notEqual(existsSync(aptLog) ? readFileSync(aptLog, 'utf8') : '', '', `MIMALLOC_PPROF_APT=1 did not reach apt-get: ${optIn.all}`);
});

test('controls: a dynamically linked library is caught; without the prebuilt package the install stops with one line and calls no apt-get', (t) => {
  if (!canRun) return t.skip('needs root (to run as nobody) on linux-x64 with setpriv');
  // the from-source build links the system's libmimalloc: the shipped-binary check flags it
  const dev = join(root, 'build', 'libmimalloc-pprof.so');
  if (existsSync(dev) && needed(dev).some((n) => /^libmimalloc\.so/.test(n))) assert.notDeepEqual(mimallocNeeds([dev]), []);
  else t.diagnostic('build/ holds no dynamically linked library to check against');

  rmSync(aptLog, { force: true });
  const app = appWith('app-no-prebuilt', {
    [`@mimalloc-pprof/${platform}`]: 'file:./missing-on-purpose',
    'pprof-format': tgz('pprof-format'),
    'gecko-profiler-demangle': tgz('gecko-profiler-demangle'),
  });
  const install = asNobody(['npm', 'install', '--offline', '--no-package-lock'], app);
  assert.notEqual(install.status, 0, install.all);
  assert.match(install.all, /mimalloc-pprof: no prebuilt package fits linux-x64, and the system libmimalloc \(2\.x or 3\.x\) with its headers is missing: install .*MIMALLOC_PPROF_APT=1/);
  assert.equal(existsSync(aptLog) ? readFileSync(aptLog, 'utf8') : '', '', 'the install called apt-get');
});

test('the loader refuses a prebuilt package that needs a newer glibc, in one line naming the fix', (t) => {
  if (process.platform !== 'linux' || process.report?.getReport() === undefined) return t.skip('Linux only');
  const fake = tempDir('mpp-glibc-');
  try {
    const dir = join(fake, 'node_modules', '@mimalloc-pprof', `linux-${process.arch}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(fake, 'package.json'), '{"name":"x","version":"1.0.0"}');
    const manifest = (glibc: string) => JSON.stringify({ name: `@mimalloc-pprof/linux-${process.arch}`, version: '1.0.0', mimallocPprof: { glibc } });
    writeFileSync(join(dir, 'package.json'), manifest('99.0'));
    const refused = prebuiltPackage(fake);
    assert.ok(refused && 'error' in refused, JSON.stringify(refused));
    assert.match(refused.error, /needs glibc 99\.0 and this system has [\d.]+: build from source with MIMALLOC_PPROF_BUILD_FROM_SOURCE=1 npm rebuild mimalloc-pprof$/);
    writeFileSync(join(dir, 'package.json'), manifest('2.17'));
    const ok = prebuiltPackage(fake);
    assert.ok(ok && 'dir' in ok && ok.dir === dir, JSON.stringify(ok));
  } finally {
    rmSync(fake, { recursive: true, force: true });
  }
});
