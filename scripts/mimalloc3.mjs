// The second mimalloc major for the tests: Debian 13's libmimalloc3 and libmimalloc-dev (3.0.1),
// fetched from the Debian registry's trixie suite with a private apt configuration (its own
// sources list, package lists and cache under build/mimalloc3/apt), unpacked with `dpkg -x`
// into build/mimalloc3/root and never installed over the system's packages. Then the preload
// library is built against it into build/mi3 with the documented
//   make -C native BUILD=… MIMALLOC_PREFIX=…
// (build/mimalloc3/prefix holds include/ and lib/ links into the unpacked tree).
//
// Usage: node scripts/mimalloc3.mjs   (idempotent; prints the library's path)
// Exported: ensureMimalloc3() for scripts/setup-test.mjs.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { debianMirror } from './debian-apt.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const mi3Dir = join(root, 'build', 'mimalloc3');
export const mi3Build = join(root, 'build', 'mi3');
export const mi3Library = join(mi3Build, 'libmimalloc-pprof.so');
const PACKAGES = ['libmimalloc3', 'libmimalloc-dev'];
const SUITE = 'trixie';

function aptOptions(apt) {
  return [
    `-o`, `Dir::Etc::SourceList=${join(apt, 'sources.list')}`,
    `-o`, `Dir::Etc::SourceParts=${join(apt, 'sources.list.d')}`,
    `-o`, `Dir::State::Lists=${join(apt, 'lists')}`,
    `-o`, `Dir::Cache=${join(apt, 'cache')}`,
    `-o`, `Dir::State::status=/var/lib/dpkg/status`,
    `-o`, `APT::Sandbox::User=root`,
  ];
}

function fetchDebs() {
  const apt = join(mi3Dir, 'apt');
  const debs = join(mi3Dir, 'debs');
  for (const d of [join(apt, 'lists', 'partial'), join(apt, 'cache', 'archives', 'partial'), join(apt, 'sources.list.d'), debs]) {
    mkdirSync(d, { recursive: true });
  }
  writeFileSync(join(apt, 'sources.list'), `deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${debianMirror()} ${SUITE} main\n`);
  const opts = aptOptions(apt);
  execFileSync('apt-get', [...opts, '-qq', 'update'], { stdio: ['ignore', 'ignore', 'inherit'] });
  execFileSync('apt-get', [...opts, '-qq', 'download', ...PACKAGES], { cwd: debs, stdio: ['ignore', 'ignore', 'inherit'] });
  return readdirSync(debs).filter((f) => f.endsWith('.deb')).map((f) => join(debs, f));
}

function unpack(debs) {
  const tree = join(mi3Dir, 'root');
  rmSync(tree, { recursive: true, force: true });
  for (const deb of debs) execFileSync('dpkg', ['-x', deb, tree]);
  const prefix = join(mi3Dir, 'prefix');
  rmSync(prefix, { recursive: true, force: true });
  mkdirSync(prefix, { recursive: true });
  const libdir = readdirSync(join(tree, 'usr', 'lib')).find((d) => existsSync(join(tree, 'usr', 'lib', d, 'libmimalloc.so')));
  if (libdir === undefined) throw new Error(`no libmimalloc.so in ${PACKAGES.join(', ')} as unpacked in ${tree}`);
  symlinkSync(join(tree, 'usr', 'include'), join(prefix, 'include'));
  symlinkSync(join(tree, 'usr', 'lib', libdir), join(prefix, 'lib'));
  return prefix;
}

/** Fetches (once) and builds (when stale); returns the library's path. */
export function ensureMimalloc3() {
  const prefix = join(mi3Dir, 'prefix');
  if (!existsSync(join(prefix, 'include', 'mimalloc.h'))) {
    if (process.getuid?.() !== 0 || !existsSync('/usr/bin/apt-get')) {
      throw new Error('mimalloc 3 for the tests comes from Debian trixie with apt-get download, which needs root on Debian/Ubuntu');
    }
    unpack(fetchDebs());
  }
  const make = spawnSync('make', ['-s', '-j2', '-C', join(root, 'native'), `BUILD=${mi3Build}`, `MIMALLOC_PREFIX=${prefix}`], {
    stdio: 'inherit',
  });
  if (make.status !== 0) throw new Error('building the preload library against mimalloc 3 failed (see above)');
  return mi3Library;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log(ensureMimalloc3());
}
