// musl for the linux-x64-musl build: Debian's musl, musl-dev and musl-tools fetched with the
// private apt configuration (scripts/debian-apt.mjs), unpacked with `dpkg -x` into
// build/musl/root and never installed. Debian's musl-gcc wrapper names absolute paths under
// /usr; here build/musl/bin/musl-gcc runs the system gcc with a specs file rewritten to the
// unpacked tree, and the kernel's headers (linux/, asm/, asm-generic/, which musl-dev does not
// carry) are reached through links in build/musl/kernel-include.
//
// Running a musl program here: the dynamic linker extracted under build/musl/root (its lib folder)
// is musl's libc.so itself; `ld-musl-x86_64.so.1 ./program` runs a program, LD_PRELOAD included.
//
// Usage: node scripts/musl.mjs   (idempotent; prints the compiler wrapper's path)
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { aptUpdate } from './debian-apt.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const muslDir = join(root, 'build', 'musl');
const SUITE = 'bookworm';
const TRIPLE = 'x86_64-linux-musl';

/** Fetches (once) and writes the wrapper; returns { cc, loader, cmakeArgs, extraMake }. */
export function ensureMusl() {
  if (process.arch !== 'x64') throw new Error('the musl build is set up for x86-64 only');
  const tree = join(muslDir, 'root');
  const lib = join(tree, 'usr', 'lib', TRIPLE);
  if (!existsSync(join(tree, 'lib', TRIPLE, 'libc.so'))) {
    const debs = join(muslDir, 'debs');
    rmSync(debs, { recursive: true, force: true });
    mkdirSync(debs, { recursive: true });
    const opts = aptUpdate();
    execFileSync('apt-get', [...opts, '-qq', 'download', `musl/${SUITE}`, `musl-dev/${SUITE}`, `musl-tools/${SUITE}`], { cwd: debs, stdio: ['ignore', 'ignore', 'inherit'] });
    rmSync(tree, { recursive: true, force: true });
    for (const d of readdirSync(debs)) execFileSync('dpkg', ['-x', join(debs, d), tree]);
  }
  // musl-dev's link for the linker names /lib/…/libc.so, absent here: without it the shared
  // objects would take libc.a in (a second C library inside the library)
  const devLink = join(lib, 'libc.so');
  if (!existsSync(devLink)) {
    rmSync(devLink, { force: true });
    symlinkSync(join(tree, 'lib', TRIPLE, 'libc.so'), devLink);
  }
  const kernel = join(muslDir, 'kernel-include');
  if (!existsSync(kernel)) {
    mkdirSync(kernel, { recursive: true });
    const sources = { linux: '/usr/include/linux', 'asm-generic': '/usr/include/asm-generic', asm: '/usr/include/x86_64-linux-gnu/asm' };
    for (const [name, target] of Object.entries(sources)) {
      if (!existsSync(target)) throw new Error(`the kernel's headers (${target}) are missing: Debian's linux-libc-dev`);
      symlinkSync(target, join(kernel, name));
    }
  }
  const include = join(tree, 'usr', 'include', TRIPLE);
  const original = readFileSync(join(lib, 'musl-gcc.specs'), 'utf8');
  const specs = original
    .replaceAll(`/usr/include/${TRIPLE}`, `${include} -idirafter ${kernel}`)
    .replaceAll(`/usr/lib/${TRIPLE}`, lib)
    // programs built here run here: musl's loader from the unpacked tree (shared objects,
    // what ships, have no loader of their own, so this changes nothing in them)
    .replaceAll('-dynamic-linker /lib/ld-musl-x86_64.so.1', `-dynamic-linker ${join(tree, 'lib', 'ld-musl-x86_64.so.1')}`);
  const specsFile = join(muslDir, 'musl-gcc.specs');
  writeFileSync(specsFile, specs);
  const bin = join(muslDir, 'bin');
  mkdirSync(bin, { recursive: true });
  const cc = join(bin, 'musl-gcc');
  // the specs' link line replaces gcc's, which Debian's gcc gives a build ID: asked for here,
  // so the shipped library and the programs built with it carry one (profiles name binaries by it)
  writeFileSync(cc, `#!/bin/sh\nexec "\${REALGCC:-gcc}" "$@" -specs "${specsFile}" -Wl,--build-id\n`);
  chmodSync(cc, 0o755);
  return {
    cc,
    loader: join(tree, 'lib', TRIPLE, 'libc.so'),
    // mimalloc's cmake probes for libatomic and the like with the compiler given
    cmakeArgs: ['-DMI_LIBC_MUSL=ON'],
    extraMake: [],
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log(ensureMusl().cc);
}
