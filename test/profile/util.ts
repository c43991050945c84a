/** Test support for the profile layer: a small profile builder and a structural view for
 * comparing profiles independently of ids and string-table order. */
import { join } from 'node:path';

import { Function as PFunction, Label, Line, Location, Mapping, Profile, Sample, StringTable, ValueType } from '../../src/profile/pprof.js';

import { unsampleHeapPair } from '../../src/profile/heap-text.js';
import { root } from '../helpers.js';

export const profileFixtures = join(root, 'test', 'profile', 'fixtures');

export interface SpecMapping {
  start: number | bigint;
  limit: number | bigint;
  offset?: number | bigint;
  file?: string;
  buildId?: string;
}

export interface SpecSample {
  /** Leaf first: a number/bigint is an address, a string a function name (a symbolised location). */
  stack: (number | bigint | string)[];
  values: (number | bigint)[];
  labels?: { key: string; str?: string; num?: number; unit?: string }[];
}

export interface Spec {
  types?: [string, string][];
  period?: number;
  mappings?: SpecMapping[];
  samples: SpecSample[];
  comments?: string[];
  defaultType?: string;
}

export const HEAP_TYPES: [string, string][] = [
  ['alloc_objects', 'count'],
  ['alloc_space', 'bytes'],
  ['inuse_objects', 'count'],
  ['inuse_space', 'bytes'],
];

/** A valid profile from a compact description (location and function ids in order of use). */
export function makeProfile(spec: Spec): Profile {
  const st = new StringTable();
  const mappings = (spec.mappings ?? []).map(
    (m, i) =>
      new Mapping({
        id: i + 1,
        memoryStart: m.start,
        memoryLimit: m.limit,
        fileOffset: m.offset ?? 0,
        filename: st.dedup(m.file ?? ''),
        buildId: st.dedup(m.buildId ?? ''),
      }),
  );
  const functions: PFunction[] = [];
  const fnIds = new Map<string, number>();
  const locations: Location[] = [];
  const locIds = new Map<string, number>();
  const locFor = (frame: number | bigint | string): number => {
    const key = typeof frame === 'string' ? `f:${frame}` : `a:${frame}`;
    let id = locIds.get(key);
    if (id !== undefined) return id;
    id = locations.length + 1;
    if (typeof frame === 'string') {
      let fid = fnIds.get(frame);
      if (fid === undefined) {
        fid = functions.length + 1;
        functions.push(new PFunction({ id: fid, name: st.dedup(frame), systemName: st.dedup(frame), filename: st.dedup('demo.c'), startLine: fid }));
        fnIds.set(frame, fid);
      }
      locations.push(new Location({ id, line: [new Line({ functionId: fid, line: 10 + fid })] }));
    } else {
      const m = (spec.mappings ?? []).findIndex((x) => BigInt(frame) >= BigInt(x.start) && BigInt(frame) < BigInt(x.limit));
      locations.push(new Location({ id, mappingId: m >= 0 ? m + 1 : 0, address: frame }));
    }
    locIds.set(key, id);
    return id;
  };
  const types = spec.types ?? HEAP_TYPES;
  const samples = spec.samples.map(
    (s) =>
      new Sample({
        locationId: s.stack.map(locFor),
        value: s.values,
        label: (s.labels ?? []).map(
          (l) => new Label({ key: st.dedup(l.key), str: l.str ? st.dedup(l.str) : 0, num: l.num ?? 0, numUnit: l.unit ? st.dedup(l.unit) : 0 }),
        ),
      }),
  );
  return new Profile({
    sampleType: types.map(([t, u]) => new ValueType({ type: st.dedup(t), unit: st.dedup(u) })),
    sample: samples,
    mapping: mappings,
    location: locations,
    function: functions,
    stringTable: st,
    periodType: new ValueType({ type: st.dedup('space'), unit: st.dedup('bytes') }),
    period: spec.period ?? 524288,
    comment: (spec.comments ?? []).map((c) => st.dedup(c)),
    defaultSampleType: spec.defaultType ? st.dedup(spec.defaultType) : 0,
  });
}

const s = (p: Profile, i: number | bigint) => p.stringTable.strings[Number(i)] ?? '';

/**
 * A structural view: types, period, mappings by content, samples (sorted) with stacks of
 * `file+0xoffset` (or 0xaddress, or function names) and values as strings.
 */
export function view(p: Profile, opts: { labels?: boolean; buildIds?: boolean } = {}): unknown {
  const maps = new Map(p.mapping.map((m) => [String(m.id), m]));
  const fns = new Map(p.function.map((f) => [String(f.id), f]));
  const locs = new Map(p.location.map((l) => [String(l.id), l]));
  const frame = (id: number | bigint) => {
    const l = locs.get(String(id))!;
    if (l.line.length > 0) return l.line.map((ln) => s(p, fns.get(String(ln.functionId))!.name)).join('/');
    const m = maps.get(String(l.mappingId));
    return m ? `${s(p, m.filename)}+0x${(BigInt(l.address) - BigInt(m.memoryStart)).toString(16)}` : `0x${l.address.toString(16)}`;
  };
  return {
    types: p.sampleType.map((t) => `${s(p, t.type)}/${s(p, t.unit)}`),
    period: String(p.period),
    periodType: p.periodType ? `${s(p, p.periodType.type)}/${s(p, p.periodType.unit)}` : '',
    mappings: p.mapping.map(
      (m) => `${m.memoryStart.toString(16)}-${m.memoryLimit.toString(16)}@${m.fileOffset.toString(16)} ${s(p, m.filename)}${opts.buildIds === false ? '' : ` ${s(p, m.buildId)}`}`,
    ),
    samples: p.sample
      .map((x) => {
        const labels = opts.labels === false ? '' : ` {${x.label.map((l) => `${s(p, l.key)}=${s(p, l.str) || String(l.num)}`).join(',')}}`;
        return `${x.locationId.map(frame).join(' ')} = ${x.value.map(String).join(',')}${labels}`;
      })
      .sort(),
  };
}

/** A deterministic PRNG (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Unsampled heap values (alloc pair, in-use pair) of raw sampled pairs at 512 KiB. */
export function heap(ac: number, ab: number, ic: number, ib: number, rate = 524288): (number | bigint)[] {
  return [...unsampleHeapPair(ac, ab, rate), ...unsampleHeapPair(ic, ib, rate)];
}

/** A demo profile: two binaries, a shared library, unsymbolised and symbolised frames. */
export function demoProfile(): Profile {
  return makeProfile({
    period: 524288,
    mappings: [
      { start: 0x555555554000, limit: 0x555555560000, offset: 0x1000, file: '/usr/bin/demo', buildId: 'abc123' },
      { start: 0x7ffff7c00000, limit: 0x7ffff7d80000, offset: 0x28000, file: '/usr/lib/x86_64-linux-gnu/libc.so.6' },
    ],
    samples: [
      { stack: [0x7ffff7c10010, 0x555555555100, 0x555555555200], values: heap(2, 2048, 1, 1024), labels: [{ key: 'bytes', num: 1024, unit: 'bytes' }] },
      { stack: [0x555555555110, 0x555555555200], values: heap(10, 10485760, 10, 10485760), labels: [{ key: 'bytes', num: 1048576, unit: 'bytes' }] },
      { stack: ['leaf_alloc', 'alloc_small', 'main'], values: [81925, 5243200, 65540, 4194560], labels: [{ key: 'thread', str: 'worker-1' }] },
      { stack: ['leaf_alloc', 'alloc_big', 'main'], values: [1, 1212696, 1, 1212696] },
      { stack: [0x1234], values: heap(3, 300, 0, 0) },
    ],
    comments: ['demo profile'],
    defaultType: 'inuse_space',
  });
}
