/**
 * The arms of a comparison: which allocator, as which library to preload, with which
 * environment. Known kinds are found on the system (ldconfig's cache, then the usual library
 * directories); one that is not installed is skipped with the package that provides it.
 *
 *   glibc                     no preload: the C library's own malloc
 *   mimalloc                  the system libmimalloc, plain (the one the preload library links)
 *   jemalloc                  libjemalloc.so.2
 *   tcmalloc                  gperftools' libtcmalloc_minimal.so.4 (libtcmalloc.so.4 if alone)
 *   mimalloc-pprof            this package's preload library, profiler stopped
 *   mimalloc-pprof-profiling  the same with MIMALLOC_PROF=1 (default interval, no dump)
 *
 * An arm is written KIND, LABEL=KIND (a second arm of a kind, e.g. two identical arms), or
 * LABEL=/path/to/lib.so (any preloadable allocator).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { UsageError } from '../errors.js';
import { buildHint, libraryPath } from '../preload/library.js';

export const KINDS = ['glibc', 'mimalloc', 'jemalloc', 'tcmalloc', 'mimalloc-pprof', 'mimalloc-pprof-profiling'] as const;
export type Kind = (typeof KINDS)[number] | 'custom';

export const DEFAULT_ALLOCATORS = ['glibc', 'mimalloc', 'jemalloc', 'tcmalloc'];

/** One arm, resolved: what the runner needs. */
export interface Arm {
  label: string;
  kind: Kind;
  /** absolute path of the library to preload; undefined for glibc */
  library?: string;
  /** extra environment of every run of this arm */
  env: Record<string, string>;
  /** the allocator is mimalloc underneath (the exact counters apply) */
  mimalloc: boolean;
  /** a command line put before the command (API only: e.g. heaptrack, a wrapping profiler) */
  wrap?: string[];
}

/** An arm that could not be resolved: not installed, with the package that provides it. */
export interface Skipped {
  label: string;
  kind: Kind;
  reason: string;
  package?: string;
}

/** Library file names by kind, most preferred first, and the Debian/Ubuntu package. */
const LIBRARIES: Record<'mimalloc' | 'jemalloc' | 'tcmalloc', { files: string[]; pkg: string }> = {
  mimalloc: { files: ['libmimalloc.so.3', 'libmimalloc.so.2', 'libmimalloc.so'], pkg: 'libmimalloc2.0' },
  jemalloc: { files: ['libjemalloc.so.2', 'libjemalloc.so'], pkg: 'libjemalloc2' },
  tcmalloc: {
    files: ['libtcmalloc_minimal.so.4', 'libtcmalloc.so.4', 'libtcmalloc_minimal.so', 'libtcmalloc.so'],
    pkg: 'libgoogle-perftools4',
  },
};

/** Where to look when ldconfig's cache does not say; tests pass their own. */
export interface Lookup {
  /** library file name → path, as ldconfig -p lists them (undefined: ask ldconfig) */
  cache?: Map<string, string>;
  dirs?: string[];
  /** the preload library (undefined: libraryPath(), which may throw when not built) */
  preload?: string | null;
}

const MULTIARCH: Record<string, string> = {
  x64: 'x86_64-linux-gnu',
  arm64: 'aarch64-linux-gnu',
  arm: 'arm-linux-gnueabihf',
  ppc64: 'powerpc64le-linux-gnu',
  s390x: 's390x-linux-gnu',
  riscv64: 'riscv64-linux-gnu',
};

function defaultDirs(): string[] {
  const triple = MULTIARCH[process.arch];
  return [
    ...(triple ? [`/usr/lib/${triple}`, `/lib/${triple}`, `/usr/local/lib/${triple}`] : []),
    '/usr/lib64',
    '/usr/lib',
    '/lib64',
    '/lib',
    '/usr/local/lib',
    '/usr/local/lib64',
  ];
}

let ldconfigCache: Map<string, string> | undefined;

/** `ldconfig -p`: name → path, for this machine's word size (64-bit entries preferred). */
export function ldconfigLibraries(): Map<string, string> {
  if (ldconfigCache) return ldconfigCache;
  const out = new Map<string, string>();
  for (const bin of ['ldconfig', '/sbin/ldconfig', '/usr/sbin/ldconfig']) {
    const r = spawnSync(bin, ['-p'], { encoding: 'utf8' });
    if (r.status !== 0 || !r.stdout) continue;
    for (const line of r.stdout.split('\n')) {
      const m = /^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)/.exec(line);
      if (!m) continue;
      const [, name, flags, path] = m as unknown as [string, string, string, string];
      const is64 = /64/.test(flags);
      if (!out.has(name) || (is64 && !out.get(`${name}#64`))) {
        out.set(name, path);
        if (is64) out.set(`${name}#64`, path);
      }
    }
    break;
  }
  for (const k of [...out.keys()]) if (k.endsWith('#64')) out.delete(k);
  ldconfigCache = out;
  return out;
}

function findLibrary(files: string[], lookup: Lookup): string | undefined {
  const cache = lookup.cache ?? ldconfigLibraries();
  for (const f of files) {
    const p = cache.get(f);
    if (p && existsSync(p)) return p;
  }
  for (const f of files) {
    for (const d of lookup.dirs ?? defaultDirs()) {
      const p = join(d, f);
      if (existsSync(p)) return p;
    }
  }
  return undefined;
}

/** The libmimalloc the preload library links (ldd), so that "mimalloc" is what mimalloc-pprof forwards to. */
function linkedMimalloc(preload: string): string | undefined {
  const r = spawnSync('ldd', [preload], { encoding: 'utf8' });
  const m = /^\s*libmimalloc[^\s]*\.so[^\s]*\s+=>\s+(\/\S+)/m.exec(r.stdout ?? '');
  return m && existsSync(m[1]!) ? m[1] : undefined;
}

function preloadLibrary(lookup: Lookup): string | undefined {
  if (lookup.preload !== undefined) return lookup.preload ?? undefined;
  try {
    return libraryPath();
  } catch {
    return undefined;
  }
}

const LABEL = /^[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}$/;

function isKind(s: string): s is (typeof KINDS)[number] {
  return (KINDS as readonly string[]).includes(s);
}

/** Parses --allocators (comma-separated arms). */
export function parseAllocators(list: string): { label: string; spec: string }[] {
  const items = list.split(',').map((s) => s.trim());
  if (items.length === 0 || items.some((s) => s === '')) throw new UsageError(`compare: --allocators needs a comma-separated list (got '${list}')`);
  const out: { label: string; spec: string }[] = [];
  for (const item of items) {
    const eq = item.indexOf('=');
    const label = eq >= 0 ? item.slice(0, eq) : item;
    const spec = eq >= 0 ? item.slice(eq + 1) : item;
    if (!LABEL.test(label)) throw new UsageError(`compare: '${label}' is not a usable arm name (letters, digits, _ . + -)`);
    if (!isKind(spec) && !spec.includes('/')) {
      throw new UsageError(`compare: unknown allocator '${spec}' (one of ${KINDS.join(', ')}, or NAME=/path/to/lib.so)`);
    }
    if (out.some((o) => o.label === label)) throw new UsageError(`compare: the arm '${label}' is given twice (name the second NAME=${spec})`);
    out.push({ label, spec });
  }
  return out;
}

/** Resolves parsed arms to libraries; the ones not installed are returned as skipped. */
export function resolveAllocators(
  arms: { label: string; spec: string }[],
  lookup: Lookup = {},
): { arms: Arm[]; skipped: Skipped[] } {
  const resolved: Arm[] = [];
  const skipped: Skipped[] = [];
  for (const { label, spec } of arms) {
    if (!isKind(spec)) {
      const path = resolve(spec);
      if (!existsSync(path)) throw new UsageError(`compare: ${label}=${spec}: no such file`);
      resolved.push({ label, kind: 'custom', library: realpathSync(path), env: {}, mimalloc: false });
      continue;
    }
    switch (spec) {
      case 'glibc':
        resolved.push({ label, kind: spec, env: {}, mimalloc: false });
        break;
      case 'mimalloc': {
        const preload = preloadLibrary(lookup);
        const lib = (preload && linkedMimalloc(preload)) ?? findLibrary(LIBRARIES.mimalloc.files, lookup);
        if (lib) resolved.push({ label, kind: spec, library: lib, env: {}, mimalloc: true });
        else skipped.push({ label, kind: spec, reason: 'not installed', package: LIBRARIES.mimalloc.pkg });
        break;
      }
      case 'jemalloc':
      case 'tcmalloc': {
        const lib = findLibrary(LIBRARIES[spec].files, lookup);
        if (lib) resolved.push({ label, kind: spec, library: lib, env: {}, mimalloc: false });
        else skipped.push({ label, kind: spec, reason: 'not installed', package: LIBRARIES[spec].pkg });
        break;
      }
      case 'mimalloc-pprof':
      case 'mimalloc-pprof-profiling': {
        const preload = preloadLibrary(lookup);
        if (!preload) {
          skipped.push({ label, kind: spec, reason: `the preload library is not built (${buildHint()})` });
          break;
        }
        const env: Record<string, string> = spec === 'mimalloc-pprof-profiling' ? { MIMALLOC_PROF: '1' } : {};
        resolved.push({ label, kind: spec, library: preload, env, mimalloc: true });
        break;
      }
    }
  }
  return { arms: resolved, skipped };
}

/** The apt-get line for a skipped arm's package. */
export function installHint(s: Skipped): string {
  return s.package ? `${s.reason} (Debian/Ubuntu: apt-get install ${s.package})` : s.reason;
}

/** Applies --env LABEL:KEY=VALUE options to the arms (settings of skipped arms are dropped). */
export function applyArmEnv(arms: Arm[], settings: string[], skipped: readonly Skipped[] = []): void {
  for (const s of settings) {
    const m = /^([^:=]+):([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(s);
    if (!m) throw new UsageError(`compare: --env needs ARM:NAME=VALUE (got '${s}')`);
    const arm = arms.find((a) => a.label === m[1]);
    if (!arm && skipped.some((k) => k.label === m[1])) continue;
    if (!arm) throw new UsageError(`compare: --env ${s}: no arm named '${m[1]}' (arms: ${arms.map((a) => a.label).join(', ')})`);
    if (m[2] === 'LD_PRELOAD') throw new UsageError('compare: --env cannot set LD_PRELOAD (name the library as an arm: NAME=/path/to/lib.so)');
    arm.env[m[2]!] = m[3]!;
  }
}
