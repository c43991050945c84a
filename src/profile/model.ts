/**
 * The in-memory profile model: pprof-format's `Profile`, which mirrors profile.proto field by
 * field (ids, string-table indexes, leaf-first location lists). This file holds the numeric
 * conventions and the read-only helpers every codec and operation shares.
 *
 * Numeric convention: every integer field holds a *canonical* `Numeric` — a `number` when it
 * is a safe integer, else a `bigint` (uint64 addresses above 2^53, int64 values beyond ±2^53).
 * Because the form is canonical, equal values are `===` and can key a `Map`. int64 fields
 * (values, string indexes, line numbers) are signed; uint64 fields (ids, addresses) unsigned.
 */
import { Function as PFunction, Location, Mapping, type Profile } from './pprof.js';

export { Function, Label, Line, Location, Mapping, Profile, Sample, StringTable, ValueType } from './pprof.js';

export type Numeric = number | bigint;

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = -MAX_SAFE;
export const U64_MAX = (1n << 64n) - 1n;

/** The canonical form of an integer: a number when safe, else a bigint. */
export function canon(v: bigint): Numeric {
  return v <= MAX_SAFE && v >= MIN_SAFE ? Number(v) : v;
}

/** Canonical form of any Numeric (a bigint that fits becomes a number). */
export function canonical(v: Numeric): Numeric {
  return typeof v === 'bigint' ? canon(v) : v;
}

export function toBig(v: Numeric): bigint {
  return typeof v === 'bigint' ? v : BigInt(v);
}

/** The value as a float (exact below 2^53). */
export function toNum(v: Numeric): number {
  return typeof v === 'bigint' ? Number(v) : v;
}

export function isZero(v: Numeric): boolean {
  return v === 0 || v === 0n;
}

/** a + b with int64 wrap-around (as Go's int64 arithmetic), canonical. */
export function add64(a: Numeric, b: Numeric): Numeric {
  if (typeof a === 'number' && typeof b === 'number') {
    const s = a + b;
    if (Number.isSafeInteger(s)) return s;
  }
  return canon(BigInt.asIntN(64, toBig(a) + toBig(b)));
}

/** a − b with int64 wrap-around, canonical. */
export function sub64(a: Numeric, b: Numeric): Numeric {
  if (typeof a === 'number' && typeof b === 'number') {
    const s = a - b;
    if (Number.isSafeInteger(s)) return s;
  }
  return canon(BigInt.asIntN(64, toBig(a) - toBig(b)));
}

/**
 * A float converted to int64 by truncation, as Go's `int64(f)` for in-range values; out of
 * range it saturates (Go's result there is platform-defined) and NaN becomes 0.
 */
export function truncToInt64(f: number): Numeric {
  if (Number.isNaN(f)) return 0;
  const t = Math.trunc(f);
  if (Number.isSafeInteger(t)) return t;
  if (t >= 9223372036854775807) return (1n << 63n) - 1n;
  if (t <= -9223372036854775808) return -(1n << 63n);
  return canon(BigInt(t));
}

/** Lower-case hexadecimal with `0x`, as pprof prints addresses. */
export function hex(v: Numeric): string {
  return `0x${v.toString(16)}`;
}

/** The string at `index` in the profile's string table ('' when out of range). */
export function str(p: Profile, index: Numeric): string {
  return p.stringTable.strings[toNum(index)] ?? '';
}

/** Quick lookups by id over a (validated) profile. */
export interface ProfileIndex {
  readonly profile: Profile;
  readonly locations: Map<Numeric, Location>;
  readonly functions: Map<Numeric, PFunction>;
  readonly mappings: Map<Numeric, Mapping>;
}

export function indexProfile(p: Profile): ProfileIndex {
  const locations = new Map<Numeric, Location>();
  const functions = new Map<Numeric, PFunction>();
  const mappings = new Map<Numeric, Mapping>();
  for (const l of p.location) locations.set(canonical(l.id), l);
  for (const f of p.function) functions.set(canonical(f.id), f);
  for (const m of p.mapping) mappings.set(canonical(m.id), m);
  return { profile: p, locations, functions, mappings };
}

/** The last path component (POSIX), as Go's filepath.Base on Linux. */
export function baseName(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  if (trimmed === '') return path === '' ? '' : '/';
  const i = trimmed.lastIndexOf('/');
  return i < 0 ? trimmed : trimmed.slice(i + 1);
}

/**
 * Display names of the frames at one location, innermost (inlined) first: each line's
 * Function.name; a location without named lines shows as `[basename]` of its mapping's file,
 * else as `0x<address>`.
 */
export function frameNames(ix: ProfileIndex, loc: Location): string[] {
  const names: string[] = [];
  for (const line of loc.line) {
    const f = ix.functions.get(canonical(line.functionId));
    const name = f ? str(ix.profile, f.name) : '';
    if (name !== '') names.push(name);
  }
  if (names.length > 0) return names;
  const m = isZero(loc.mappingId) ? undefined : ix.mappings.get(canonical(loc.mappingId));
  const file = m ? str(ix.profile, m.filename) : '';
  return [file !== '' ? `[${baseName(file)}]` : hex(loc.address)];
}

/** `type/unit` of each sample type. */
export function sampleTypeNames(p: Profile): string[] {
  return p.sampleType.map((t) => `${str(p, t.type)}/${str(p, t.unit)}`);
}

/**
 * Index of the sample type named `name` (e.g. `inuse_space`), or -1. As pprof does, an
 * `inuse_` name also finds the bare type of a two-type heap profile (`space`, `objects`).
 */
export function findSampleType(p: Profile, name: string): number {
  const types = p.sampleType.map((t) => str(p, t.type));
  const i = types.indexOf(name);
  if (i >= 0) return i;
  if (name.startsWith('inuse_')) return types.indexOf(name.slice('inuse_'.length));
  return -1;
}

/** The two heap aliases: a bare `space`/`objects` type is the in-use one. */
export function heapTypeName(type: string): string {
  return type === 'space' || type === 'objects' ? `inuse_${type}` : type;
}
