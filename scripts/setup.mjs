// The install script (`npm install`, `npm rebuild mimalloc-pprof`). It changes nothing on the
// system and runs no package manager unless asked:
//  - a prebuilt package of this platform (@mimalloc-pprof/<platform>, an optional dependency,
//    mimalloc linked in) is installed and fits this C library: nothing is built;
//  - else (or MIMALLOC_PPROF_BUILD_FROM_SOURCE=1, `npm rebuild --build-from-source`) the
//    native parts are built into build/ with the C compiler and make, against the system's
//    libmimalloc (2.x or 3.x) when its headers are there;
//  - without them: MIMALLOC_PPROF_APT=1 as root on Debian/Ubuntu installs libmimalloc-dev with
//    apt-get (after one line saying so); MIMALLOC_PPROF_APT=1 otherwise, and by default in a
//    git checkout of the project (its own `npm install`), builds mimalloc from Debian's source
//    package into build/ (scripts/prebuild.mjs: a private apt configuration, no root, nothing
//    installed); anything else stops with one line naming the package for the system.
// MIMALLOC_PPROF_APT=0 refuses apt-get in every form, also in a checkout.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
let prefix = process.env.MIMALLOC_PREFIX ?? '';
let staticArchive = '';
// MIMALLOC_PPROF_NO_APT=1 (the former opt-out) still refuses
const aptChoice = process.env.MIMALLOC_PPROF_APT ?? (process.env.MIMALLOC_PPROF_NO_APT === '1' ? '0' : undefined);
const fromSource = process.env.MIMALLOC_PPROF_BUILD_FROM_SOURCE === '1' || process.env.npm_config_build_from_source === 'true';
const checkout = existsSync(join(root, '.git')) && !root.split(sep).includes('node_modules');

function fail(message) {
  console.error(`mimalloc-pprof: ${message}`);
  process.exit(1);
}

function hasMimalloc() {
  const dir = mkdtempSync(join(tmpdir(), 'mimalloc-pprof-probe-'));
  try {
    const src = join(dir, 'probe.c');
    writeFileSync(src, '#include <mimalloc.h>\nint main(void){return mi_version()>0?0:1;}\n');
    const flags = prefix ? [`-I${prefix}/include`, `-L${prefix}/lib`] : [];
    const cc = process.env.CC ?? 'cc';
    return spawnSync(cc, [src, ...flags, '-lmimalloc', '-o', join(dir, 'probe')], { stdio: 'ignore' }).status === 0;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function osId() {
  if (process.platform === 'darwin') return 'darwin';
  try {
    const text = readFileSync('/etc/os-release', 'utf8');
    const id = /^ID=(.*)$/m.exec(text)?.[1]?.replace(/"/g, '') ?? '';
    const like = /^ID_LIKE=(.*)$/m.exec(text)?.[1]?.replace(/"/g, '') ?? '';
    return `${id} ${like}`;
  } catch {
    return '';
  }
}

const packageFor = [
  [/debian|ubuntu/, 'libmimalloc-dev (apt-get install libmimalloc-dev)'],
  [/fedora|rhel|centos/, 'mimalloc-devel (dnf install mimalloc-devel)'],
  [/alpine/, 'mimalloc2-dev (apk add mimalloc2-dev)'],
  [/darwin/, 'mimalloc (brew install mimalloc)'],
];

/** This platform's prebuilt package name (as the loader in src/preload/library.ts names it). */
function platformName() {
  const glibc = process.report?.getReport?.()?.header?.glibcVersionRuntime;
  return `${process.platform}-${process.arch}${process.platform === 'linux' && !glibc ? '-musl' : ''}`;
}

function versionBelow(a, b) {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) < (y[i] ?? 0);
  return false;
}

/** The installed prebuilt package: { dir } when it fits, { why } when it does not, undefined when absent. */
function prebuilt() {
  const name = `@mimalloc-pprof/${platformName()}`;
  let manifestPath;
  try {
    manifestPath = createRequire(join(root, 'package.json')).resolve(`${name}/package.json`);
  } catch {
    return undefined;
  }
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
  const needs = manifest.mimallocPprof?.glibc;
  const has = process.report?.getReport?.()?.header?.glibcVersionRuntime;
  if (needs && has && versionBelow(has, needs)) return { why: `${name} needs glibc ${needs}, this system has ${has}` };
  return { dir: dirname(manifestPath) };
}

if (process.platform !== 'linux') {
  // Not an install failure: a team that profiles on Linux servers reads, compares and reports
  // those profiles on its laptops (docs/platforms.md, macOS and Windows).
  console.error(`mimalloc-pprof: the preload library needs Linux (LD_PRELOAD); this system is ${process.platform}: profiles can be read here (top, growth, diff, report, convert), not taken`);
  process.exit(0);
}

if (!fromSource) {
  const p = prebuilt();
  if (p?.dir) process.exit(0); // the prebuilt package has everything: nothing to build
  if (p?.why) console.error(`mimalloc-pprof: ${p.why}: building from source`);
}

if (!hasMimalloc()) {
  const id = osId();
  const pkg = packageFor.find(([re]) => re.test(id))?.[1] ?? 'the mimalloc development package of your system';
  const missing = `no prebuilt package fits ${platformName()}, and the system libmimalloc (2.x or 3.x) with its headers is missing: install ${pkg}, or set MIMALLOC_PPROF_APT=1 to let this script fetch it from Debian (see docs/install.md)`;
  const isRoot = process.getuid?.() === 0;
  const aptGet = (process.env.PATH ?? '').split(':').map((d) => join(d, 'apt-get')).find((p) => p.startsWith('/') && existsSync(p));
  const debian = /debian|ubuntu/.test(id);
  if (aptChoice === '1' && debian && isRoot && aptGet !== undefined) {
    console.error('mimalloc-pprof: installing libmimalloc-dev with apt-get (apt-get update; apt-get install libmimalloc-dev), as MIMALLOC_PPROF_APT=1 asks');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    for (const args of [['update', '-qq'], ['install', '-y', '-qq', 'libmimalloc-dev']]) {
      const r = spawnSync(aptGet, args, { stdio: 'inherit', env });
      if (r.status !== 0) fail(`apt-get ${args[0]} failed (exit ${r.status ?? r.signal}); ${missing}`);
    }
    if (!hasMimalloc()) fail(`${missing} (apt-get installed libmimalloc-dev, but the probe still fails: is CC=${process.env.CC ?? 'cc'} a working C compiler?)`);
  } else if ((aptChoice === '1' || (checkout && aptChoice !== '0')) && aptGet !== undefined) {
    console.error(`mimalloc-pprof: building mimalloc from Debian's source package into build/ (${aptChoice === '1' ? 'MIMALLOC_PPROF_APT=1' : 'a checkout of the project'}; nothing is installed on the system; MIMALLOC_PPROF_APT=0 refuses)`);
    try {
      const { staticMimalloc } = await import('./prebuild.mjs');
      const mi = staticMimalloc();
      prefix = mi.prefix;
      staticArchive = mi.archive;
    } catch (e) {
      fail(`building mimalloc from Debian's source failed (${e instanceof Error ? e.message : String(e)}); ${missing}`);
    }
  } else {
    fail(`${missing}${aptChoice === '0' ? ' (MIMALLOC_PPROF_APT=0: not using apt-get)' : ''}`);
  }
}

// Node's own headers, for the Node-API addon (the in-process API and `run`'s exit hook).
const includeCandidates = [
  process.env.npm_config_nodedir,
  process.config.variables.node_prefix,
  join(dirname(process.execPath), '..'),
  '/usr',
  '/usr/local',
]
  .filter((d) => typeof d === 'string' && d !== '')
  .map((d) => join(d, 'include', 'node'));
const nodeInclude = includeCandidates.find((d) => existsSync(join(d, 'node_api.h')));
if (nodeInclude === undefined) {
  fail(`Node's headers (node_api.h) are missing: looked in ${includeCandidates.join(', ')}; install the headers of this Node ${process.version}`);
}

// make cannot name files whose paths have spaces: it runs in native/ and builds into ../build,
// so the package may live anywhere (e.g. under "My Projects/")
const mimallocArgs = staticArchive ? [`MIMALLOC_PREFIX=${prefix}`, `MIMALLOC_STATIC=${staticArchive}`] : prefix ? [`MIMALLOC_PREFIX=${prefix}`] : [];
const make = spawnSync('make', ['-s', `BUILD=../build`, `NODE_INCLUDE=${nodeInclude}`, ...mimallocArgs], {
  cwd: join(root, 'native'),
  stdio: 'inherit',
});
if (make.status !== 0) fail('building the preload library failed (see above)');

// `mimalloc-pprof compare`'s run helper (fork/exec, then wait4's rusage as JSON): a separate,
// standalone program, rebuilt when missing or older than its source.
{
  const src = join(root, 'native', 'tools', 'mpp-rusage.c');
  const out = join(root, 'build', 'mpp-rusage');
  const fresh = existsSync(out) && statSync(out).mtimeMs >= statSync(src).mtimeMs;
  if (existsSync(src) && !fresh) {
    const cc = spawnSync(process.env.CC ?? 'cc', ['-std=gnu11', '-O2', '-Wall', '-Wextra', '-Werror', '-o', out, src, '-ldl'], {
      stdio: 'inherit',
    });
    if (cc.status !== 0) fail('building the compare helper (native/tools/mpp-rusage.c) failed (see above)');
  }
}

// pkg-config for C and C++ programs that use the C API (`pkg-config --cflags --libs
// mimalloc-pprof` with PKG_CONFIG_PATH from `npx mimalloc-pprof pkg-config-path`): the
// include folder and the library, linked with an rpath so the program finds it at run time.
{
  const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
  const mimallocInclude = prefix ? ` -I${join(prefix, 'include')}` : '';
  const pc = [
    `prefix=${root}`,
    'includedir=${prefix}/native/include',
    'libdir=${prefix}/build',
    '',
    'Name: mimalloc-pprof',
    'Description: mimalloc with sampled heap profiles and memory events (preload library and C API)',
    `Version: ${version}`,
    `Cflags: -I\${includedir}${mimallocInclude}`,
    'Libs: -L${libdir} -Wl,-rpath,${libdir} -lmimalloc-pprof',
    '',
  ].join('\n');
  const path = join(root, 'build', 'mimalloc-pprof.pc');
  if (!existsSync(path) || readFileSync(path, 'utf8') !== pc) writeFileSync(path, pc);
}
