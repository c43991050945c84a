import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
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

/** The platforms with a prebuilt package (@mimalloc-pprof/<name>, mimalloc linked in). */
export const PREBUILT_PLATFORMS = ['linux-x64', 'linux-arm64', 'linux-x64-musl'] as const;
export const PREBUILT_SCOPE = '@mimalloc-pprof';

/** glibc's version at run time ("2.36"), or undefined under another C library (musl). */
export function glibcVersion(): string | undefined {
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  return header?.glibcVersionRuntime;
}

/** This platform's name as the prebuilt packages spell it: linux-x64, linux-x64-musl, … */
export function platformName(platform: string = process.platform, arch: string = process.arch, glibc: string | undefined = glibcVersion()): string {
  return `${platform}-${arch}${platform === 'linux' && glibc === undefined ? '-musl' : ''}`;
}

function versionBelow(a: string, b: string): boolean {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) < (y[i] ?? 0);
  return false;
}

/** Where the native files come from: `build/` (built from source) or a prebuilt package. */
export interface NativeSource {
  dir: string;
  kind: 'build' | 'prebuilt';
  /** The prebuilt package's name and mimalloc's Debian version in it. */
  package?: string;
  mimalloc?: string;
}

/**
 * The prebuilt package of this platform: its folder when installed and usable here, an error
 * message when installed but unusable (the glibc it needs is newer), undefined when absent.
 */
export function prebuiltPackage(root = packageRoot): NativeSource | { error: string } | undefined {
  const name = `${PREBUILT_SCOPE}/${platformName()}`;
  let manifestPath: string;
  try {
    manifestPath = createRequire(join(root, 'package.json')).resolve(`${name}/package.json`);
  } catch {
    return undefined;
  }
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as { mimallocPprof?: { glibc?: string; mimalloc?: string } };
  const needs = manifest.mimallocPprof?.glibc;
  const has = glibcVersion();
  if (needs !== undefined && has !== undefined && versionBelow(has, needs)) {
    return { error: `${name} needs glibc ${needs} and this system has ${has}: build from source with MIMALLOC_PPROF_BUILD_FROM_SOURCE=1 npm rebuild mimalloc-pprof` };
  }
  return { dir: dirname(manifestPath), kind: 'prebuilt', package: name, ...(manifest.mimallocPprof?.mimalloc ? { mimalloc: manifest.mimallocPprof.mimalloc } : {}) };
}

/** The one line for a platform no prebuilt package covers and where nothing was built. */
export function unsupportedHint(name = platformName()): string {
  const linux = name.startsWith('linux-');
  return linux
    ? `no prebuilt package for ${name} (there are: ${PREBUILT_PLATFORMS.join(', ')}): build from source with MIMALLOC_PPROF_BUILD_FROM_SOURCE=1 npm rebuild mimalloc-pprof (a C compiler, make and the system's mimalloc headers)`
    : `mimalloc-pprof needs Linux (LD_PRELOAD); this is ${name}`;
}

/**
 * The folder the native files come from: `build/` when it holds a library built from source
 * (the package's install builds one only when no prebuilt package fits, or when asked with
 * MIMALLOC_PPROF_BUILD_FROM_SOURCE=1), else the prebuilt package of this platform. Throws the
 * error naming the fix when neither is there.
 */
export function nativeSource(root = packageRoot): NativeSource {
  const build = nativeBuildDir(root);
  if (existsSync(join(build, LIBRARY_FILE))) return { dir: build, kind: 'build' };
  const p = prebuiltPackage(root);
  if (p !== undefined && 'error' in p) throw new LibraryMissingError(p.error);
  if (p !== undefined) return p;
  const name = platformName();
  if (!name.startsWith('linux-') || !(PREBUILT_PLATFORMS as readonly string[]).includes(name)) throw new LibraryMissingError(unsupportedHint(name));
  throw new LibraryMissingError(`the preload library is not built (${join(build, LIBRARY_FILE)} is missing and ${PREBUILT_SCOPE}/${name} is not installed): ${buildHint(root)}`);
}

/** Absolute path of one native file (the library, the addon, the rusage helper). */
export function nativeFile(file: string): string {
  const source = nativeSource();
  const path = join(source.dir, file);
  if (!existsSync(path)) {
    throw new LibraryMissingError(`${file} is missing from ${source.dir}: ${source.kind === 'prebuilt' ? `reinstall ${source.package}` : buildHint()}`);
  }
  return path;
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
  return nativeFile(LIBRARY_FILE);
}

export const ADDON_FILE = 'mimalloc_pprof.node';

/** Absolute path of the Node-API addon that reaches the preload library from JavaScript. */
export function addonPath(): string {
  return nativeFile(ADDON_FILE);
}

/** The folder of the C API's headers (native/include). */
export function includePath(): string {
  const dir = join(packageRoot, 'native', 'include');
  if (!existsSync(join(dir, 'mimalloc-pprof', 'memory-events.h'))) {
    throw new LibraryMissingError(`the C headers are missing from ${dir}: reinstall mimalloc-pprof`);
  }
  return dir;
}

/** The folder of mimalloc-pprof.pc: written by the build next to the library, or shipped in the prebuilt package. */
export function pkgConfigPath(): string {
  const dir = nativeSource().dir;
  if (!existsSync(join(dir, 'mimalloc-pprof.pc'))) {
    throw new LibraryMissingError(`mimalloc-pprof.pc is not built (${dir} has none): ${buildHint()}`);
  }
  return dir;
}
