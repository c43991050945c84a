/**
 * top: the flat/cumulative table of `go tool pprof -top` for one sample type.
 *  - frames of a sample: its locations leaf first, each expanded to its lines innermost
 *    first, named by frameNames (function name; else `[mapping basename]`; else 0x<addr>);
 *  - flat: a sample's value goes to its leaf frame; cum: to every distinct name in its stack
 *    (once per sample, so recursion is not double counted);
 *  - total: the sum of |value| over samples (pprof's computeTotal), the base of flat% and
 *    cum%; samples with value 0 are skipped;
 *  - order: |flat| descending, then name, then |cum| descending (pprof's FlatNameOrder).
 * Unlike pprof, drop_frames/keep_frames are not applied (their regexes come from the input).
 */
import { canonical, frameNames, indexProfile, type Numeric, type Profile, toNum } from './model.js';

export interface TopRow {
  /** Sum of the values of samples whose leaf frame this is. */
  flat: number;
  /** flat as a percentage of the total. */
  flatPct: number;
  /** Sum of the values of samples with this frame anywhere in their stack. */
  cum: number;
  /** cum as a percentage of the total. */
  cumPct: number;
  /** The frame's name. */
  name: string;
}

function checkIndex(p: Profile, sampleIndex: number): void {
  if (!Number.isInteger(sampleIndex) || sampleIndex < 0 || sampleIndex >= p.sampleType.length) {
    throw new RangeError(`sample index ${sampleIndex} is not one of the profile's ${p.sampleType.length} sample types`);
  }
}

/** pprof's total: the sum of |value| of one sample type. */
export function totalValue(p: Profile, sampleIndex: number): number {
  checkIndex(p, sampleIndex);
  let total = 0;
  for (const s of p.sample) total += Math.abs(toNum(s.value[sampleIndex]!));
  return total;
}

/** The top `n` rows (all when n is omitted) for the sample type at `sampleIndex`. */
export function top(p: Profile, sampleIndex: number, n = Infinity): TopRow[] {
  checkIndex(p, sampleIndex);
  const ix = indexProfile(p);
  const names = new Map<Numeric, string[]>();
  const flat = new Map<string, number>();
  const cum = new Map<string, number>();
  let total = 0;
  const seen = new Set<string>();
  for (const s of p.sample) {
    const v = toNum(s.value[sampleIndex]!);
    if (v === 0) continue;
    total += Math.abs(v);
    seen.clear();
    let leaf: string | undefined;
    for (const id of s.locationId) {
      const key = canonical(id);
      let fr = names.get(key);
      if (!fr) {
        fr = frameNames(ix, ix.locations.get(key)!);
        names.set(key, fr);
      }
      for (const name of fr) {
        leaf ??= name;
        if (!seen.has(name)) {
          seen.add(name);
          cum.set(name, (cum.get(name) ?? 0) + v);
        }
      }
    }
    if (leaf !== undefined) flat.set(leaf, (flat.get(leaf) ?? 0) + v);
  }
  const pct = (x: number) => (total === 0 ? 0 : (100 * x) / total);
  const rows: TopRow[] = [...cum.entries()].map(([name, c]) => {
    const f = flat.get(name) ?? 0;
    return { flat: f, flatPct: pct(f), cum: c, cumPct: pct(c), name };
  });
  rows.sort((a, b) => {
    const fa = Math.abs(a.flat);
    const fb = Math.abs(b.flat);
    if (fa !== fb) return fb - fa;
    if (a.name !== b.name) return a.name < b.name ? -1 : 1;
    return Math.abs(b.cum) - Math.abs(a.cum);
  });
  return Number.isFinite(n) ? rows.slice(0, Math.max(0, n)) : rows;
}
