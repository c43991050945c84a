// The prebuilt, self-contained binaries and their npm packages.
//
//   node scripts/prebuild.mjs [--target linux-x64|linux-x64-musl|linux-arm64 ...] [--no-pack]
// (linux-arm64 with scripts/cross.mjs's cross compiler; it fetches it once, as root)
//
// For each target: mimalloc from Debian's source package (fetched with the private apt
// configuration of scripts/debian-apt.mjs, the .dsc checked against the SHA-256 pinned below,
// the tarballs against the .dsc by dpkg-source) built with cmake into a static, position-
// independent archive with MI_OVERRIDE=OFF; then the preload library, the Node-API addon and
// the helper tools, with that archive linked in and its names hidden (native/Makefile
// MIMALLOC_STATIC). Every binary is checked: no libmimalloc among its needed libraries, no
// mimalloc name exported, a build ID, the glibc version it needs (recorded in the package, for
// the loader).
// Then one npm package per target (@mimalloc-pprof/<target>, selected by os/cpu/libc) and the
// main package with them as optionalDependencies, packed with `npm pack` into build/packages.
//
// Exported: staticMimalloc() for scripts/setup.mjs (a fresh clone without a system mimalloc).
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { aptUpdate } from './debian-apt.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
export const SCOPE = '@mimalloc-pprof';

/**
 * mimalloc's Debian source packages, newest first, each with the SHA-256 of its .dsc as
 * Debian's signed Sources index gives it (`apt-get --print-uris source mimalloc=<version>`).
 * The newest whose files the registry serves is used; MIMALLOC_PPROF_MIMALLOC_SOURCE=<version>
 * asks for one of them.
 */
export const MIMALLOC_SOURCES = [
  { version: '3.6.0+ds-1', suite: 'sid', dscSha256: '8ba5f29f49f0505aee3fb2adb808e1645cb89015d21367bac90e250b05c57485' },
  { version: '3.0.1+ds-2.1', suite: 'trixie', dscSha256: '7904c3edc6bf8e23b0f4a8524f3090aa6f27d2c161d45c181f29f37c9c169f21' },
  { version: '2.0.9+ds-2', suite: 'bookworm', dscSha256: 'fb324e4faaa693d90f5bf0a8e652ea96f41d4c7f6ea432ea819756e8f70ce42d' },
];

/** The targets: npm's os/cpu/libc, the compiler, cmake's extra arguments. */
export const TARGETS = {
  'linux-x64': { os: 'linux', cpu: 'x64', libc: 'glibc' },
  'linux-x64-musl': { os: 'linux', cpu: 'x64', libc: 'musl' },
  'linux-arm64': { os: 'linux', cpu: 'arm64', libc: 'glibc' },
};

function log(line) {
  console.error(`prebuild: ${line}`);
}

function sha256(file) {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

/** Fetches and unpacks the newest pinned source the registry serves; returns { version, tree }. */
export function mimallocSource() {
  const base = join(root, 'build', 'mimalloc-static');
  const wanted = process.env.MIMALLOC_PPROF_MIMALLOC_SOURCE;
  const candidates = MIMALLOC_SOURCES.filter((s) => !wanted || s.version === wanted);
  if (candidates.length === 0) throw new Error(`MIMALLOC_PPROF_MIMALLOC_SOURCE=${wanted} is not pinned (known: ${MIMALLOC_SOURCES.map((s) => s.version).join(', ')})`);
  let opts;
  for (const s of candidates) {
    const dir = join(base, 'src', s.version);
    const tree = join(dir, 'tree');
    const dsc = join(dir, `mimalloc_${s.version.replace(/^\d+:/, '')}.dsc`);
    if (existsSync(join(tree, 'CMakeLists.txt')) && existsSync(dsc) && sha256(dsc) === s.dscSha256) return { version: s.version, tree };
    opts ??= aptUpdate();
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const r = spawnSync('apt-get', [...opts, '-qq', 'source', '--download-only', `mimalloc=${s.version}`], { cwd: dir, encoding: 'utf8' });
    if (r.status !== 0 || !existsSync(dsc)) {
      log(`mimalloc ${s.version} (${s.suite}): the registry does not serve its source (${(r.stderr || '').trim().split('\n').pop()}); trying the next pinned one`);
      continue;
    }
    const got = sha256(dsc);
    if (got !== s.dscSha256) throw new Error(`mimalloc ${s.version}: the .dsc's SHA-256 is ${got}, pinned ${s.dscSha256}: refusing it`);
    // dpkg-source checks each tarball against the checksums of the (pinned) .dsc
    execFileSync('dpkg-source', ['--no-check', '-x', dsc, tree], { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] });
    return { version: s.version, tree };
  }
  throw new Error(`none of mimalloc's pinned Debian sources (${candidates.map((s) => s.version).join(', ')}) could be fetched`);
}

/**
 * mimalloc as a static, position-independent archive without its malloc override, built
 * with cmake from Debian's source into build/mimalloc-static/<name>/prefix (include/, lib/).
 * Returns { version, prefix, archive, license }.
 */
export function staticMimalloc({ name = 'host', cc = process.env.CC ?? 'cc', cmakeArgs = [] } = {}) {
  const { version, tree } = mimallocSource();
  const dir = join(root, 'build', 'mimalloc-static', name, version);
  const prefix = join(dir, 'prefix');
  const archive = join(prefix, 'lib', 'libmimalloc.a');
  if (!existsSync(archive)) {
    const work = join(dir, 'cmake');
    rmSync(dir, { recursive: true, force: true });
    const configure = [
      '-S', tree, '-B', work, '-DCMAKE_BUILD_TYPE=Release', `-DCMAKE_INSTALL_PREFIX=${prefix}`,
      '-DCMAKE_INSTALL_LIBDIR=lib', `-DCMAKE_C_COMPILER=${cc}`, '-DCMAKE_POSITION_INDEPENDENT_CODE=ON',
      '-DCMAKE_C_FLAGS=-fPIC -fvisibility=hidden', '-DMI_OVERRIDE=OFF', '-DMI_BUILD_SHARED=OFF',
      '-DMI_BUILD_STATIC=ON', '-DMI_BUILD_OBJECT=OFF', '-DMI_BUILD_TESTS=OFF', '-DMI_INSTALL_TOPLEVEL=ON',
      ...cmakeArgs,
    ];
    execFileSync('cmake', configure, { stdio: ['ignore', 'ignore', 'inherit'] });
    execFileSync('cmake', ['--build', work, '-j2'], { stdio: ['ignore', 'ignore', 'inherit'] });
    execFileSync('cmake', ['--install', work], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (!existsSync(archive)) throw new Error(`cmake installed no ${archive}`);
    // mimalloc's own allocation names must not be defined: the library interposes them itself
    const defined = definedNames(archive);
    const override = ['malloc', 'free', 'calloc', 'realloc', 'posix_memalign'].filter((n) => defined.has(n));
    if (override.length > 0) throw new Error(`${archive} defines the malloc family (${override.join('; ')}): built with MI_OVERRIDE on?`);
  }
  return { version, prefix, archive, license: join(tree, 'LICENSE') };
}

/** Node's own headers (node_api.h) for the addon; undefined when missing. */
export function nodeInclude() {
  const candidates = [process.env.npm_config_nodedir, process.config.variables.node_prefix, join(dirname(process.execPath), '..'), '/usr', '/usr/local']
    .filter((d) => typeof d === 'string' && d !== '')
    .map((d) => join(d, 'include', 'node'));
  return { found: candidates.find((d) => existsSync(join(d, 'node_api.h'))), candidates };
}

/** The dynamic facts of one ELF file: needed libraries, exported names, glibc version required. */
export function elfFacts(file, readelf = 'readelf') {
  const dyn = execFileSync(readelf, ['-d', '-W', file], { encoding: 'utf8' });
  const needed = [...dyn.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
  const syms = execFileSync(readelf, ['--dyn-syms', '-W', file], { encoding: 'utf8' });
  const exported = syms
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f.length >= 8 && f[6] !== 'UND' && /GLOBAL|WEAK/.test(f[4]) && f[5] === 'DEFAULT')
    .map((f) => f[7].replace(/@.*/, ''));
  const versions = [...syms.matchAll(/@GLIBC_(\d+)\.(\d+)(?:\.(\d+))?/g)].map((m) => [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)]);
  versions.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
  const top = versions.at(-1);
  const buildId = /Build ID: ([0-9a-f]+)/.exec(execFileSync(readelf, ['-n', '-W', file], { encoding: 'utf8' }))?.[1];
  return { needed, exported, glibc: top ? top.slice(0, top[2] ? 3 : 2).join('.') : undefined, buildId };
}

/** The global names an object or archive defines (readelf reads any ELF machine's). */
export function definedNames(file, readelf = 'readelf') {
  const out = execFileSync(readelf, ['-s', '-W', file], { encoding: 'utf8', maxBuffer: 64 << 20 });
  return new Set(
    out
      .split('\n')
      .map((l) => l.trim().split(/\s+/))
      .filter((f) => f.length >= 8 && /^\d+:$/.test(f[0]) && f[6] !== 'UND' && /GLOBAL|WEAK/.test(f[4]))
      .map((f) => f[7]),
  );
}

/** The checks every shipped binary must pass; returns the glibc version required (or undefined). */
export function checkShipped(files, archive, readelf = 'readelf') {
  const archiveNames = definedNames(archive, readelf);
  let glibc;
  for (const f of files) {
    const facts = elfFacts(f, readelf);
    const mi = facts.needed.filter((n) => /mimalloc/.test(n) && !/mimalloc-pprof/.test(n));
    if (mi.length > 0) throw new Error(`${f} needs ${mi.join(', ')}: not self-contained`);
    const leaked = facts.exported.filter((s) => archiveNames.has(s));
    if (leaked.length > 0) throw new Error(`${f} exports mimalloc's own names (${leaked.slice(0, 5).join(', ')}…)`);
    if (!facts.needed.some((n) => /^libc\.so/.test(n))) throw new Error(`${f} needs no shared C library: the C library was linked in`);
    const allowed = /^(libc|libm|libdl|libpthread|librt|ld-linux[-\w]*|ld-musl-[\w]+)\.so(\.\d+)?$/;
    const other = facts.needed.filter((n) => !allowed.test(n));
    if (other.length > 0) throw new Error(`${f} needs ${other.join(', ')}, which a slim system may lack`);
    // profiles name a binary by its build ID (pprof's mappings, symbolisation elsewhere)
    if (facts.buildId === undefined) throw new Error(`${f} has no build ID (link with --build-id)`);
    if (facts.glibc && (!glibc || cmpVersion(facts.glibc, glibc) > 0)) glibc = facts.glibc;
  }
  return glibc;
}

export function cmpVersion(a, b) {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** Builds the binaries of one target into build/prebuilt/<target>; returns what was built. */
export function buildTarget(target, { cc = process.env.CC ?? 'cc', cmakeArgs = [], readelf = 'readelf', extraMake = [] } = {}) {
  const mi = staticMimalloc({ name: target, cc, cmakeArgs });
  const out = join(root, 'build', 'prebuilt', target);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const inc = nodeInclude().found;
  if (inc === undefined) throw new Error("Node's headers (node_api.h) are missing");
  const make = spawnSync('make', ['-s', '-j2', `BUILD=${out}`, `CC=${cc}`, `MIMALLOC_PREFIX=${mi.prefix}`, `MIMALLOC_STATIC=${mi.archive}`, `NODE_INCLUDE=${inc}`, ...extraMake], {
    cwd: join(root, 'native'),
    stdio: 'inherit',
  });
  if (make.status !== 0) throw new Error(`building ${target} failed (see above)`);
  const tool = spawnSync(cc, ['-std=gnu11', '-O2', '-Wall', '-Wextra', '-Werror', '-o', join(out, 'mpp-rusage'), join(root, 'native', 'tools', 'mpp-rusage.c'), '-ldl'], { stdio: 'inherit' });
  if (tool.status !== 0) throw new Error(`building ${target}'s mpp-rusage failed (see above)`);
  rmSync(join(out, 'obj'), { recursive: true, force: true });
  const binaries = ['libmimalloc-pprof.so', 'mimalloc_pprof.node', 'mpp-rusage'].map((f) => join(out, f));
  const glibc = checkShipped(binaries, mi.archive, readelf);
  return { out, binaries, glibc, mimalloc: mi };
}

/** The npm package of one target, staged in build/packages/<target> and packed; returns the tarball. */
export function packTarget(target, built) {
  const t = TARGETS[target];
  const dir = join(root, 'build', 'packages', target);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'include'), { recursive: true });
  for (const f of built.binaries) copyFileSync(f, join(dir, f.split('/').pop()));
  // the C API's headers and mimalloc's (memory-events.h includes <mimalloc.h>), for pkg-config
  cpSync(join(root, 'native', 'include'), join(dir, 'include'), { recursive: true });
  copyFileSync(join(built.mimalloc.prefix, 'include', 'mimalloc.h'), join(dir, 'include', 'mimalloc.h'));
  copyFileSync(join(root, 'LICENSE'), join(dir, 'LICENSE'));
  copyFileSync(built.mimalloc.license, join(dir, 'LICENSE.mimalloc'));
  writeFileSync(
    join(dir, 'mimalloc-pprof.pc'),
    [
      'prefix=${pcfiledir}',
      'includedir=${prefix}/include',
      'libdir=${prefix}',
      '',
      'Name: mimalloc-pprof',
      'Description: mimalloc with sampled heap profiles and memory events (preload library and C API; mimalloc linked in)',
      `Version: ${pkg.version}`,
      'Cflags: -I${includedir}',
      'Libs: -L${libdir} -Wl,-rpath,${libdir} -lmimalloc-pprof',
      '',
    ].join('\n'),
  );
  const manifest = {
    name: `${SCOPE}/${target}`,
    version: pkg.version,
    description: `The prebuilt native parts of mimalloc-pprof for ${target} (mimalloc ${built.mimalloc.version} from Debian's source, linked in statically)`,
    license: 'MIT',
    repository: pkg.repository,
    os: [t.os],
    cpu: [t.cpu],
    ...(t.libc ? { libc: [t.libc] } : {}),
    files: ['libmimalloc-pprof.so', 'mimalloc_pprof.node', 'mpp-rusage', 'mimalloc-pprof.pc', 'include', 'LICENSE', 'LICENSE.mimalloc'],
    mimallocPprof: {
      mimalloc: built.mimalloc.version,
      libc: t.libc,
      ...(built.glibc ? { glibc: built.glibc } : {}),
    },
  };
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2) + '\n');
  return npmPack(dir);
}

function npmPack(dir) {
  const dest = join(root, 'build', 'packages');
  const out = execFileSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dest], { cwd: dir, encoding: 'utf8' });
  const info = JSON.parse(out)[0];
  return { tarball: join(dest, info.filename), size: info.size, unpackedSize: info.unpackedSize, name: info.name };
}

/**
 * The main package as published: the files `npm pack` takes from the repository, its
 * package.json with the platform packages as optionalDependencies (exact versions) and without
 * what only the repository needs (devDependencies, the scripts but `install`).
 */
export function packMain(targets) {
  if (!existsSync(join(root, 'dist', 'src', 'index.js'))) throw new Error('dist/ is not built: run `npx tsc -p tsconfig.json` first');
  const dir = join(root, 'build', 'packages', 'main');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const list = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--ignore-scripts', '--json'], { cwd: root, encoding: 'utf8' }))[0].files;
  for (const { path } of list) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    copyFileSync(join(root, path), join(dir, path));
  }
  const manifest = { ...pkg };
  delete manifest.devDependencies;
  manifest.scripts = { install: pkg.scripts.install };
  manifest.optionalDependencies = Object.fromEntries(targets.map((t) => [`${SCOPE}/${t}`, pkg.version]));
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2) + '\n');
  return npmPack(dir);
}

/** What each target needs from the machine, or why it cannot be built here. */
async function targetOptions(target) {
  if (target === 'linux-x64') return process.arch === 'x64' ? {} : { skip: 'needs an x64 build machine' };
  if (target === 'linux-x64-musl') {
    const { ensureMusl } = await import('./musl.mjs');
    const m = ensureMusl();
    return { cc: m.cc, cmakeArgs: m.cmakeArgs, extraMake: m.extraMake };
  }
  if (target === 'linux-arm64') {
    const cross = join(root, 'scripts', 'cross.mjs');
    if (!existsSync(cross)) return { skip: 'no cross toolchain script (scripts/cross.mjs)' };
    const { ensureCrossToolchain } = await import(cross);
    const t = ensureCrossToolchain();
    return { cc: t.cc, cmakeArgs: ['-DCMAKE_SYSTEM_NAME=Linux', '-DCMAKE_SYSTEM_PROCESSOR=aarch64'] };
  }
  return { skip: 'unknown target' };
}

async function main() {
  const args = process.argv.slice(2);
  const wanted = args.flatMap((a, i) => (args[i - 1] === '--target' ? [a] : []));
  const targets = wanted.length > 0 ? wanted : ['linux-x64', 'linux-x64-musl', 'linux-arm64'];
  const packed = [];
  for (const target of targets) {
    if (!TARGETS[target]) throw new Error(`unknown target ${target} (known: ${Object.keys(TARGETS).join(', ')})`);
    const o = await targetOptions(target);
    if (o.skip) {
      log(`${target}: skipped (${o.skip})`);
      continue;
    }
    const built = buildTarget(target, o);
    log(`${target}: mimalloc ${built.mimalloc.version} linked in; needs glibc ${built.glibc ?? '(none: musl)'}; ${built.out}`);
    if (!args.includes('--no-pack')) {
      const p = packTarget(target, built);
      packed.push(target);
      log(`${target}: ${p.tarball} (${(p.size / 1024).toFixed(0)} KiB packed, ${(p.unpackedSize / 1024).toFixed(0)} KiB unpacked)`);
    }
  }
  if (!args.includes('--no-pack')) {
    const m = packMain(Object.keys(TARGETS));
    log(`main: ${m.tarball} (${(m.size / 1024).toFixed(0)} KiB packed, ${(m.unpackedSize / 1024).toFixed(0)} KiB unpacked); optionalDependencies: ${Object.keys(TARGETS).join(', ')}`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    console.error(`prebuild: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
}
