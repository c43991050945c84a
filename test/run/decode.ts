/** A `run` profile (gzipped profile.proto) decoded into one record per sample, for tests. */
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';

import { Profile } from '../../src/profile/pprof.js';
import { assertFewUnnamed } from '../node-names.js';

export interface DecodedSample {
  inuse: number;
  inuseObjects: number;
  alloc: number;
  names: string[];
  files: string[];
  thread: string;
  /** `native` (the preload's samples) or `js` (V8's sampling heap profiler) */
  heap: string;
  /** the sampled request's size */
  size: number;
}

export interface Decoded {
  profile: Profile;
  str: (i: number | bigint) => string;
  samples: DecodedSample[];
}

/** Decodes; a Node profile must also have ≤ 1 % beneath frames without a name (node-names.ts),
 * unless `unnamed: 'allowed'` (a control that breaks naming on purpose). */
export function decode(path: string, options: { unnamed?: 'allowed' } = {}): Decoded {
  const buf = readFileSync(path);
  const profile = Profile.decode(buf[0] === 0x1f ? gunzipSync(buf) : buf);
  if (options.unnamed !== 'allowed') assertFewUnnamed(profile, path);
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const fn = new Map(profile.function.map((f) => [Number(f.id), f]));
  const loc = new Map(profile.location.map((l) => [Number(l.id), l]));
  const types = profile.sampleType.map((t) => str(t.type));
  const samples = profile.sample.map((s) => {
    const lines = s.locationId.flatMap((id) => loc.get(Number(id))?.line ?? []);
    const label = (key: string) => s.label.find((l) => str(l.key) === key);
    return {
      inuse: Number(s.value[types.indexOf('inuse_space')]),
      inuseObjects: Number(s.value[types.indexOf('inuse_objects')]),
      alloc: Number(s.value[types.indexOf('alloc_space')] ?? 0),
      names: lines.map((l) => str(fn.get(Number(l.functionId))?.name ?? 0)),
      files: lines.map((l) => str(fn.get(Number(l.functionId))?.filename ?? 0)),
      thread: str(label('thread')?.str ?? 0),
      heap: str(label('heap')?.str ?? 0),
      size: Number(label('bytes')?.num ?? 0),
    };
  });
  return { profile, str, samples };
}
