// Builds the preload library against the system libmimalloc. Run by `npm install` (and by
// `npm rebuild mimalloc-pprof` after an install with --ignore-scripts).
// Where the development files are missing: as root on Debian/Ubuntu with apt-get they are
// installed with apt-get, after one line that says so and how to refuse (MIMALLOC_PPROF_NO_APT=1);
// anywhere else, or when refused, this stops with one line naming the package for the system.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const prefix = process.env.MIMALLOC_PREFIX ?? '';

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

if (process.platform !== 'linux') {
  fail('the preload library needs Linux (LD_PRELOAD); this system is ' + process.platform);
}

if (!hasMimalloc()) {
  const id = osId();
  const pkg = packageFor.find(([re]) => re.test(id))?.[1] ?? 'the mimalloc development package of your system';
  const missing = `the system libmimalloc (2.x or 3.x) with its headers is missing: install ${pkg}`;
  const isRoot = process.getuid?.() === 0;
  const aptGet = (process.env.PATH ?? '').split(':').map((d) => join(d, 'apt-get')).find((p) => p.startsWith('/') && existsSync(p));
  const refused = process.env.MIMALLOC_PPROF_NO_APT === '1';
  // Installing on the host is done only where it is safe to assume it is wanted: as root, on
  // Debian or Ubuntu, with apt-get, and not refused. Anything else stops with the package name.
  if (!/debian|ubuntu/.test(id) || !isRoot || aptGet === undefined || refused) {
    fail(`${missing}${refused ? ' (MIMALLOC_PPROF_NO_APT=1: not installing it with apt-get)' : ''}`);
  }
  console.error('mimalloc-pprof: installing libmimalloc-dev with apt-get (apt-get update; apt-get install libmimalloc-dev); set MIMALLOC_PPROF_NO_APT=1 to refuse');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update', '-qq'], ['install', '-y', '-qq', 'libmimalloc-dev']]) {
    const r = spawnSync(aptGet, args, { stdio: 'inherit', env });
    if (r.status !== 0) fail(`apt-get ${args[0]} failed (exit ${r.status ?? r.signal}); ${missing}`);
  }
  if (!hasMimalloc()) fail(`${missing} (apt-get installed libmimalloc-dev, but the probe still fails: is CC=${process.env.CC ?? 'cc'} a working C compiler?)`);
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
const make = spawnSync('make', ['-s', `BUILD=../build`, `NODE_INCLUDE=${nodeInclude}`], {
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
