/**
 * Where memory was allocated, in the program's own JavaScript: each sample's value goes to its
 * deepest JavaScript frame of the program (not Node's internals, `node:…`, not this package's
 * scripts), so a handler is named rather than the top level that called it. A profile without
 * such frames (a C program, or no perf map) gets its top native allocation sites instead.
 */
import type { Profile } from './pprof.js';

import { isProfilerScript } from './growth.js';
import { findSampleType } from './model.js';
import { top } from './top.js';
import { isJavaScriptName } from '../symbolize/perfmap.js';

/** A JavaScript function of the program: not Node's internals (`node:…`), not this package's. */
export function isProgramFunction(profile: Profile, f: Profile['function'][number]): boolean {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  return isJavaScriptName(str(f.systemName)) && !str(f.filename).startsWith('node:') && !isProfilerScript(str(f.filename));
}

/** The `n` functions holding the most of `sampleType`, `name file:line` for JavaScript, most first. */
export function holders(profile: Profile, sampleType: string, n: number): [string, number][] {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const at = findSampleType(profile, sampleType);
  if (at < 0) return [];
  const fn = new Map(profile.function.map((f) => [Number(f.id), f]));
  const locations = new Map(profile.location.map((l) => [Number(l.id), l]));
  const program = (f: (typeof profile.function)[number] | undefined) => f !== undefined && isProgramFunction(profile, f);
  // the profiler's own work (this package's scripts and its codec, pprof-format) is nobody's
  const own = (f: (typeof profile.function)[number] | undefined) =>
    f !== undefined && isJavaScriptName(str(f.systemName)) && (isProfilerScript(str(f.filename)) || str(f.filename).includes('/node_modules/pprof-format/'));
  const by = new Map<string, number>();
  for (const s of profile.sample) {
    // from the leaf: the profiler's own frame first means the profiler's work (skipped); a
    // program's frame first, the program's (which a test may have called from memoryBudget)
    let found: string | undefined;
    let profilers = false;
    for (const id of s.locationId) {
      for (const line of locations.get(Number(id))?.line ?? []) {
        const f = fn.get(Number(line.functionId));
        if (own(f)) {
          profilers = true;
          break;
        }
        if (program(f)) {
          found = str(f!.filename) ? `${str(f!.name)} ${str(f!.filename)}:${Number(f!.startLine)}` : str(f!.name);
          break;
        }
      }
      if (found !== undefined || profilers) break;
    }
    if (found !== undefined) by.set(found, (by.get(found) ?? 0) + Number(s.value[at] ?? 0));
  }
  const js = [...by].filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
  if (js.length > 0) return js.slice(0, n);
  return top(profile, at)
    .filter((r) => r.flat > 0)
    .slice(0, n)
    .map((r) => [r.name, r.flat]);
}

/**
 * The same profile with each sample's stack cut to start at its deepest JavaScript function of
 * the program (in place): flat figures then say how much each such function holds, as
 * `holders` ranks them, and growth's fit of flat rows gives each its slope and interval. A
 * sample without one keeps its stack (its leaf is a native allocation site).
 */
export function cutToProgramFunctions(profile: Profile): Profile {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const fn = new Map(profile.function.map((f) => [Number(f.id), f]));
  const locations = new Map(profile.location.map((l) => [Number(l.id), l]));
  const program = new Map<number, boolean>();
  const isProgramLocation = (id: number) => {
    let v = program.get(id);
    if (v === undefined) {
      v = (locations.get(id)?.line ?? []).some((line) => {
        const f = fn.get(Number(line.functionId));
        return f !== undefined && isProgramFunction(profile, f);
      });
      program.set(id, v);
    }
    return v;
  };
  for (const s of profile.sample) {
    const at = s.locationId.findIndex((id) => isProgramLocation(Number(id)));
    if (at > 0) s.locationId = s.locationId.slice(at);
  }
  return profile;
}
