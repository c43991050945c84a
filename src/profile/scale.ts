/**
 * scale: a copy of a profile with every value multiplied, as google/pprof's Scale/ScaleN:
 * each value of a type whose ratio is not 1 becomes round(v × ratio) (halves away from
 * zero), and a sample is dropped when all its rescaled values are 0. Ratios of 1 everywhere
 * give an unchanged copy.
 */
import { ProfileBuilder, headerOf, labelKey, sampleTypesOf } from './builder.js';
import { isZero, type Numeric, type Profile, toNum, truncToInt64 } from './model.js';

function roundAway(x: number): number {
  return Math.sign(x) * Math.round(Math.abs(x));
}

/** The profile with values scaled by `ratio` (one per sample type, or one for all). */
export function scale(p: Profile, ratio: number | readonly number[]): Profile {
  const ratios = typeof ratio === 'number' ? p.sampleType.map(() => ratio) : ratio;
  if (ratios.length !== p.sampleType.length) {
    throw new TypeError(`scale: ${ratios.length} ratios for ${p.sampleType.length} sample types`);
  }
  if (ratios.some((r) => !Number.isFinite(r))) throw new TypeError('scale: ratios must be finite numbers');
  const allOnes = ratios.every((r) => r === 1);
  const b = new ProfileBuilder();
  const src = b.source(p);
  for (let i = 0; i < p.sample.length; i++) {
    const s = p.sample[i]!;
    let keep = allOnes;
    const values: Numeric[] = s.value.map((v, k) => {
      const r = ratios[k]!;
      if (r === 1) return v;
      const nv = truncToInt64(roundAway(toNum(v) * r));
      keep ||= !isZero(nv);
      return nv;
    });
    if (!keep) continue;
    const locs = s.locationId.map((id) => b.location(src, id));
    // one sample per source sample: the index keeps distinct samples apart
    b.add(`${i}|${labelKey(p, s)}`, locs, values, b.labels(src, s));
  }
  const h = headerOf(p);
  return b.build({ sampleType: sampleTypesOf(p), ...h }, allOnes);
}
