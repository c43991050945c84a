import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { LibraryMissingError } from '../errors.js';

/** The package root: dist/src/preload/ is three levels below it. */
export const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export const LIBRARY_FILE = 'libmimalloc-pprof.so';

/**
 * The folder of the native build for this Node's architecture: build/linux-<arch> where a
 * cross build for it exists (an arm64 Node under emulation on an x86-64 machine:
 * scripts/cross.mjs builds into build/linux-arm64), build/ otherwise (the native build).
 */
export function nativeBuildDir(root = packageRoot): string {
  const cross = join(root, 'build', `${process.platform}-${process.arch}`);
  return existsSync(join(cross, LIBRARY_FILE)) ? cross : join(root, 'build');
}

/**
 * The command that builds the native parts: installed as a dependency (whose install script
 * did not run, e.g. `npm install --ignore-scripts`), `npm rebuild mimalloc-pprof` in the
 * project; in a checkout, `npm install` in it.
 */
export function buildHint(root = packageRoot): string {
  return root.split(/[\\/]/).includes('node_modules')
    ? 'run `npm rebuild mimalloc-pprof` in your project (or `node scripts/setup.mjs` in ' + root + ')'
    : 'run `npm install` (or `node scripts/setup.mjs`) in ' + root;
}

/**
 * Absolute path of the preload library. `MIMALLOC_PPROF_LIB` overrides the built one (for a
 * library built elsewhere); a missing file is an error that names the fix.
 */
export function libraryPath(env: NodeJS.ProcessEnv = process.env): string {
  const override = env.MIMALLOC_PPROF_LIB;
  if (override !== undefined && override !== '') {
    if (!existsSync(override)) {
      throw new LibraryMissingError(`MIMALLOC_PPROF_LIB points at ${override}, which does not exist`);
    }
    return resolve(override);
  }
  const built = join(nativeBuildDir(), LIBRARY_FILE);
  if (!existsSync(built)) {
    throw new LibraryMissingError(
      `the preload library is not built (${built} is missing): ${buildHint()}`,
    );
  }
  return built;
}

export const ADDON_FILE = 'mimalloc_pprof.node';

/** Absolute path of the Node-API addon that reaches the preload library from JavaScript. */
export function addonPath(): string {
  const built = join(nativeBuildDir(), ADDON_FILE);
  if (!existsSync(built)) {
    throw new LibraryMissingError(`the Node addon is not built (${built} is missing): ${buildHint()}`);
  }
  return built;
}

/** The folder of the C API's headers (native/include). */
export function includePath(): string {
  const dir = join(packageRoot, 'native', 'include');
  if (!existsSync(join(dir, 'mimalloc-pprof', 'memory-events.h'))) {
    throw new LibraryMissingError(`the C headers are missing from ${dir}: reinstall mimalloc-pprof`);
  }
  return dir;
}

/** The folder of mimalloc-pprof.pc, written by the build next to the library. */
export function pkgConfigPath(): string {
  const dir = join(packageRoot, 'build');
  if (!existsSync(join(dir, 'mimalloc-pprof.pc'))) {
    throw new LibraryMissingError(`mimalloc-pprof.pc is not built (${dir} has none): ${buildHint()}`);
  }
  return dir;
}
