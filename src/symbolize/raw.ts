/**
 * Raw dumps (the preload library's own files: heap_v2 text or uncompressed proto, written by
 * hand with MIMALLOC_PROF_DUMP_AT_EXIT or the C API) hold addresses only. They are named here
 * from the binaries still on this machine and, when the process's V8 perf map is still in
 * /tmp, its JavaScript frames too: the same naming `run` does, for files `run` did not make.
 */
import { existsSync } from 'node:fs';

import type { Profile } from '../profile/pprof.js';

import { perfMapPath } from './perfmap.js';
import { isPreloadLibrary, symbolize } from './index.js';

const num = (v: number | bigint | undefined): number => (v === undefined ? 0 : Number(v));

/** Whether some location of the profile is an address that names could be found for. */
export function hasUnnamedFrames(profile: Profile): boolean {
  const mappings = new Map(profile.mapping.map((m) => [num(m.id), m]));
  return profile.location.some((l) => l.line.length === 0 && num(l.address) !== 0 && !mappings.get(num(l.mappingId))?.hasFunctions);
}

/** A number the preload library recorded in the profile's comments (`key=N` in proto,
 * `key: N` in heap_v2 text): `pid`, `peak_rss`, `live_samples`… */
export function recordedNumber(profile: Profile, key: string): number | undefined {
  const re = new RegExp(`(?:^|\\s)${key}(?:=|: )(\\d+)(?:\\s|$)`);
  for (const c of profile.comment) {
    const m = re.exec(profile.stringTable.strings[Number(c)] ?? '');
    if (m) return Number(m[1]);
  }
  return undefined;
}

/** The pid the writer recorded. */
export const recordedPid = (profile: Profile): number | undefined => recordedNumber(profile, 'pid');

export interface NamingReport {
  /** Locations named from ELF symbols, from the perf map, by their file alone, and left as addresses. */
  native: number;
  javascript: number;
  byFile: number;
  unnamed: number;
  /** The perf map used, if any. */
  perfMap?: string;
}

/**
 * Names the frames of a raw profile in place (see the file comment) and says how many it
 * could name. A profile without unnamed frames is left alone.
 */
export function nameRawProfile(profile: Profile, options: { pid?: number; perfMapDir?: string; perfMapFile?: string } = {}): NamingReport {
  if (!hasUnnamedFrames(profile)) return { native: 0, javascript: 0, byFile: 0, unnamed: 0 };
  const pid = options.pid ?? recordedPid(profile);
  const map = options.perfMapFile ?? (pid === undefined ? undefined : perfMapPath(pid, options.perfMapDir));
  const perfMap = map !== undefined && existsSync(map) ? map : undefined;
  const { counts } = symbolize(profile, { ...(pid !== undefined ? { pid } : {}), ...(perfMap ? { perfMapPath: perfMap } : {}), trimFile: isPreloadLibrary });
  return { ...counts, ...(perfMap ? { perfMap } : {}) };
}
