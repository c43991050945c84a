/**
 * diff: NEXT − BASE as one profile, for "what grew". Sample types are matched by name and
 * unit (a two-type heap profile's `objects`/`space` match `inuse_objects`/`inuse_space`);
 * the result has NEXT's matched types, in NEXT's order, and its header. Samples are keyed
 * by their stack: a frame is its function names when the location is symbolised, else its
 * binary and file offset (so runs with different load addresses, and text and proto dumps,
 * line up); labels are dropped, or with `keepLabels` (a service's `?seconds=N` delta, whose
 * labels say which thread allocated) are part of the key and kept. Values are summed per stack, NEXT minus BASE; stacks whose differences are
 * all 0 are dropped. Throws ProfileMismatchError when no sample type is common.
 */
import { ProfileMismatchError } from '../errors.js';
import { ProfileBuilder, headerOf, labelKey, sampleTypesOf, type Source } from './builder.js';
import { baseName, canonical, heapTypeName, isZero, type Numeric, type Profile, str, sub64, toBig } from './model.js';

/**
 * The key of a stack: per frame, its function names when symbolised, else its binary's
 * base name and file offset (address − start + offset), which is the same whatever the
 * load address and whether the mapping came from /proc/self/maps (text) or from the
 * loader's program headers (native proto); else its address.
 */
function stackKey(b: ProfileBuilder, src: Source, ids: readonly Numeric[], keys: Map<Numeric, string>): { key: string; locs: number[] } {
  const p = src.ix.profile;
  const parts = ids.map((id) => {
    const c = canonical(id);
    let k = keys.get(c);
    if (k === undefined) {
      const loc = src.ix.locations.get(c)!;
      const names = loc.line.map((ln) => str(p, src.ix.functions.get(canonical(ln.functionId))?.name ?? 0)).filter((n) => n !== '');
      const m = isZero(loc.mappingId) ? undefined : src.ix.mappings.get(canonical(loc.mappingId));
      const file = m ? str(p, m.filename) : '';
      if (names.length > 0) k = `f:${names.join('\u0000')}`;
      else if (m && file !== '') k = `m:${baseName(file)}@${BigInt.asUintN(64, toBig(loc.address) - toBig(m.memoryStart) + toBig(m.fileOffset)).toString(16)}`;
      else k = `a:${loc.address.toString(16)}`;
      keys.set(c, k);
    }
    return k;
  });
  return { key: parts.join('\u0001'), locs: ids.map((id) => b.location(src, id)) };
}

/** The profile of NEXT − BASE (see the file comment). */
export function diff(base: Profile, next: Profile, options: { keepLabels?: boolean } = {}): Profile {
  const keepLabels = options.keepLabels === true;
  const bt = sampleTypesOf(base).map(([t, u]) => `${heapTypeName(t)}/${u}`);
  const nt = sampleTypesOf(next);
  const pairs: [number, number][] = [];
  nt.forEach(([t, u], j) => {
    const i = bt.indexOf(`${heapTypeName(t)}/${u}`);
    if (i >= 0) pairs.push([j, i]);
  });
  if (pairs.length === 0) {
    throw new ProfileMismatchError(
      `the two profiles have no sample type in common (${sampleTypesOf(base).map((t) => t[0]).join(', ')} and ${nt.map((t) => t[0]).join(', ')})`,
    );
  }
  const b = new ProfileBuilder();
  const nsrc = b.source(next);
  const nkeys = new Map<Numeric, string>();
  for (const s of next.sample) {
    const { key, locs } = stackKey(b, nsrc, s.locationId, nkeys);
    if (keepLabels) b.add(`${key}|${labelKey(next, s)}`, locs, pairs.map(([j]) => s.value[j]!), b.labels(nsrc, s));
    else b.add(key, locs, pairs.map(([j]) => s.value[j]!), []);
  }
  const bsrc = b.source(base);
  const bkeys = new Map<Numeric, string>();
  for (const s of base.sample) {
    const { key, locs } = stackKey(b, bsrc, s.locationId, bkeys);
    const values = pairs.map(([, i]) => sub64(0, s.value[i]!));
    if (keepLabels) b.add(`${key}|${labelKey(base, s)}`, locs, values, b.labels(bsrc, s));
    else b.add(key, locs, values, []);
  }
  const h = headerOf(next);
  const types = pairs.map(([j]) => nt[j]!);
  return b.build({
    ...h,
    sampleType: types,
    defaultSampleType: types.some(([t]) => t === h.defaultSampleType) ? h.defaultSampleType : '',
  });
}
