/**
 * The package's cache folder (ELF symbol tables, demangled names, V8's code cache of the CLI):
 * MIMALLOC_PPROF_CACHE_DIR, else $XDG_CACHE_HOME/mimalloc-pprof, else
 * ~/.cache/mimalloc-pprof; undefined with MIMALLOC_PPROF_CACHE_DIR=off or without a home folder
 * (homedir() throws when the user has no passwd entry and HOME is unset): nothing is cached.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';

export function cacheFolder(): string | undefined {
  const env = process.env.MIMALLOC_PPROF_CACHE_DIR;
  if (env === 'off') return undefined;
  if (env) return env;
  if (process.env.XDG_CACHE_HOME) return join(process.env.XDG_CACHE_HOME, 'mimalloc-pprof');
  try {
    const home = homedir();
    return home ? join(home, '.cache', 'mimalloc-pprof') : undefined;
  } catch {
    return undefined;
  }
}
