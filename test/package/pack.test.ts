/**
 * The package as users get it: `npm pack`, then installed into a fresh project (under a path
 * with a space) first with --ignore-scripts, as pnpm and locked-down CIs do, whose hint must
 * name the command that works; then used from ESM, CommonJS, the CLI, and TypeScript with
 * `NodeNext` and `node10` resolution (with the control that node10 needs the `types` field).
 * The tarball's contents: LICENSE, the docs the README links to, every relative link
 * resolving inside it, no source maps.
 */
import assert from 'node:assert/strict';
import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { after, before, test } from 'node:test';

import { root, tempDir } from '../helpers.js';

let work: string;
let tarball: string;
let files: string[];
let app: string;
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

function sh(cmd: string, args: string[], options: SpawnSyncOptions = {}) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_') && !k.startsWith('npm_')));
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 300_000, env, ...options, ...(options.env ? { env: { ...env, ...options.env } } : {}) });
  return { status: r.status, stdout: String(r.stdout ?? ''), stderr: String(r.stderr ?? ''), all: `${String(r.stdout ?? '')}\n${String(r.stderr ?? '')}` };
}

before(() => {
  work = tempDir('mpp-pack-');
  // the build is fresh (npm test builds first); prepare would only repeat it
  const r = sh(npm, ['pack', '--ignore-scripts', '--json', '--pack-destination', work], { cwd: root });
  assert.equal(r.status, 0, r.all);
  const info = (JSON.parse(r.stdout) as { filename: string; files: { path: string }[] }[])[0]!;
  tarball = join(work, info.filename);
  files = info.files.map((f) => f.path);
  app = join(work, 'fresh app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'fresh-app', version: '1.0.0', private: true }));
});

after(() => rmSync(work, { recursive: true, force: true }));

test('the tarball: LICENSE, README, the docs it links to, types, no source maps, package fields', () => {
  for (const f of ['LICENSE', 'README.md', 'package.json', 'dist/src/index.js', 'dist/src/index.d.ts', 'scripts/setup.mjs', 'native/Makefile']) {
    assert.ok(files.includes(f), `${f} is not in the tarball`);
  }
  assert.deepEqual(files.filter((f) => f.endsWith('.map')), []);
  assert.ok(!files.some((f) => f.startsWith('test/') || f.startsWith('src/') || f.startsWith('dist/test/')), 'tests or sources shipped');

  const x = join(work, 'x');
  mkdirSync(x);
  assert.equal(sh('tar', ['xzf', tarball, '-C', x]).status, 0);
  const pkgDir = join(x, 'package');
  for (const f of files.filter((f) => f.endsWith('.js'))) {
    assert.ok(!readFileSync(join(pkgDir, f), 'utf8').includes('sourceMappingURL'), `${f} names a source map`);
  }
  // every relative link of the shipped Markdown resolves inside the package
  const markdown = files.filter((f) => f.endsWith('.md'));
  assert.ok(markdown.filter((f) => f.startsWith('docs/')).length >= 5, markdown.join(' '));
  for (const f of markdown) {
    const text = readFileSync(join(pkgDir, f), 'utf8');
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!.split('#')[0]!;
      if (target === '' || /^[a-z]+:/i.test(target)) continue;
      const path = normalize(join(dirname(f), target));
      assert.ok(existsSync(join(pkgDir, path)), `${f} links to ${m[1]}, which the package does not have`);
    }
  }
  const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as Record<string, unknown>;
  assert.match(String((pkg.repository as { url?: string })?.url), /^git\+https:\/\//);
  assert.ok(typeof pkg.homepage === 'string' && typeof (pkg.bugs as { url?: string })?.url === 'string');
  assert.equal(pkg.types, './dist/src/index.d.ts');
  assert.equal(pkg.main, './dist/src/index.js');
  // require() of this ES module works unflagged from Node 20.19 and 22.12 (require(esm))
  assert.equal((pkg.engines as { node: string }).node, '^20.19.0 || >=22.12.0');
  assert.match(readFileSync(join(pkgDir, 'LICENSE'), 'utf8'), /^MIT License/);
});

test('installed into a fresh project: --ignore-scripts hint, npm rebuild, then ESM, CommonJS, the CLI and TypeScript (NodeNext, node10)', () => {
  const install = sh(npm, ['install', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline', tarball], { cwd: app });
  assert.equal(install.status, 0, install.all);
  const bin = join(app, 'node_modules', '.bin', 'mimalloc-pprof');

  // not built: the hint names the command that works, and that command works
  const unbuilt = sh(bin, ['run', '--', 'true'], { cwd: app });
  assert.notEqual(unbuilt.status, 0);
  assert.match(unbuilt.stderr, /run `npm rebuild mimalloc-pprof` in your project/);
  const rebuild = sh(npm, ['rebuild', 'mimalloc-pprof'], { cwd: app });
  assert.equal(rebuild.status, 0, rebuild.all);
  const lib = sh(bin, ['lib'], { cwd: app });
  assert.equal(lib.status, 0, lib.all);
  const installed = lib.stdout.trim();
  // LD_PRELOAD splits on the space, quoted or not: `lib` prints a link from a path without one
  assert.ok(realpathSync(installed).startsWith(join(realpathSync(app), 'node_modules', 'mimalloc-pprof')) && existsSync(installed), installed);
  assert.doesNotMatch(installed, /[\s:]/);
  assert.equal(lib.stderr, '');
  const library = installed;

  // ESM, under the preload: the profiler is there and profiles
  writeFileSync(
    join(app, 'esm.mjs'),
    `import { profiler, serve, pprofHandler } from 'mimalloc-pprof';
     if (typeof serve !== 'function' || typeof pprofHandler !== 'function') throw new Error('exports missing');
     profiler.start({ interval: 4096 });
     globalThis.keep = Buffer.alloc(4 << 20, 1);
     const p = await profiler.profile();
     console.log(JSON.stringify({ available: profiler.available().available, bytes: p.length }));`,
  );
  const esm = sh(process.execPath, ['esm.mjs'], { cwd: app, env: { LD_PRELOAD: library } });
  assert.equal(esm.status, 0, esm.all);
  const e = JSON.parse(esm.stdout) as { available: boolean; bytes: number };
  assert.equal(e.available, true);
  assert.ok(e.bytes > 100, esm.stdout);

  // CommonJS
  writeFileSync(
    join(app, 'cjs.cjs'),
    `const m = require('mimalloc-pprof');
     console.log(JSON.stringify({ start: typeof m.profiler.start, parse: typeof m.parseProfile, available: m.profiler.available().available }));`,
  );
  const cjs = sh(process.execPath, ['cjs.cjs'], { cwd: app });
  assert.equal(cjs.status, 0, cjs.all);
  assert.deepEqual(JSON.parse(cjs.stdout), { start: 'function', parse: 'function', available: false });

  // the CLI runs a program from the package's own folder, whose path has a space
  const run = sh(bin, ['run', '--out', 'prog.pb.gz', '--', process.execPath, '-e', 'globalThis.k = Buffer.alloc(8 << 20, 1)'], { cwd: app });
  assert.equal(run.status, 0, run.all);
  assert.ok(readdirSync(app).some((f) => /^prog(\.\d+)?\.pb\.gz$/.test(f)), readdirSync(app).join(' '));

  // TypeScript: NodeNext and node10 resolution find the types; a wrong option is an error
  const types = join(root, 'node_modules', '@types');
  const source = `import { profiler, type StartOptions } from 'mimalloc-pprof';
    const options: StartOptions = { interval: 65536, accum: true };
    profiler.start(options);
    // @ts-expect-error: not an option
    profiler.start({ intervall: 1 });
    export const running: boolean = profiler.isRunning();\n`;
  writeFileSync(join(app, 'nodenext.mts'), source);
  writeFileSync(join(app, 'node10.ts'), source);
  const config = (file: string, module: string, resolution: string) =>
    JSON.stringify({ compilerOptions: { target: 'ES2022', module, moduleResolution: resolution, strict: true, noEmit: true, typeRoots: [types], types: ['node'] }, files: [file] });
  writeFileSync(join(app, 'tsconfig.nodenext.json'), config('nodenext.mts', 'NodeNext', 'NodeNext'));
  writeFileSync(join(app, 'tsconfig.node10.json'), config('node10.ts', 'commonjs', 'node10'));
  // tsc's defaults (target ES5), skipLibCheck off: the shipped types, the profile model's too
  writeFileSync(
    join(app, 'plain.ts'),
    `import { parseProfile, Profile, profiler } from 'mimalloc-pprof';\nexport const p: Profile = parseProfile(new Uint8Array(0));\nexport const n: number = p.sample.length + (profiler.isRunning() ? 1 : 0);\n`,
  );
  const plain = (file: string) => JSON.stringify({ compilerOptions: { module: 'commonjs', moduleResolution: 'node10', strict: true, noEmit: true, typeRoots: [types], types: ['node'] }, files: [file] });
  writeFileSync(join(app, 'tsconfig.plain.json'), plain('plain.ts'));
  for (const c of ['tsconfig.nodenext.json', 'tsconfig.node10.json', 'tsconfig.plain.json']) {
    const r = sh(process.execPath, [tsc, '-p', c], { cwd: app });
    assert.equal(r.status, 0, `${c}: ${r.all}`);
  }
  // control: the dependency's own types (#private fields) fail that configuration (TS18028)
  writeFileSync(join(app, 'direct.ts'), `import { Profile } from 'pprof-format';\nexport const p = new Profile();\n`);
  writeFileSync(join(app, 'tsconfig.direct.json'), plain('direct.ts'));
  const direct = sh(process.execPath, [tsc, '-p', 'tsconfig.direct.json'], { cwd: app });
  assert.notEqual(direct.status, 0);
  assert.match(direct.all, /TS18028/);
  // control: without the top-level types field, node10 resolution cannot find them
  const installedPkg = join(app, 'node_modules', 'mimalloc-pprof', 'package.json');
  const original = readFileSync(installedPkg, 'utf8');
  const stripped = JSON.parse(original) as Record<string, unknown>;
  delete stripped.types;
  delete stripped.main;
  writeFileSync(installedPkg, JSON.stringify(stripped));
  try {
    const r = sh(process.execPath, [tsc, '-p', 'tsconfig.node10.json'], { cwd: app });
    assert.notEqual(r.status, 0);
    assert.match(r.all, /TS2307/);
  } finally {
    writeFileSync(installedPkg, original);
  }
});
