/**
 * merge: profiles of the same kind summed into one, as google/pprof's Merge: the sample
 * types and period types must be equal; time is the earliest, duration the sum, period the
 * largest, comments the union in order, the default sample type and doc url the first set;
 * the first profile's first mapping stays first (the main binary). Samples with the same
 * locations and labels are summed; all-zero samples are dropped. Associative up to the
 * order of ids.
 */
import { ProfileMismatchError } from '../errors.js';
import { ProfileBuilder, headerOf, labelKey, sampleTypesOf } from './builder.js';
import { isZero, type Profile, toBig, canon } from './model.js';

export function merge(profiles: readonly Profile[]): Profile {
  if (profiles.length === 0) throw new ProfileMismatchError('there are no profiles to merge');
  const first = profiles[0]!;
  const types = sampleTypesOf(first);
  const h0 = headerOf(first);
  const typeText = (t: [string, string][]) => t.map(([a, b]) => `${a}/${b}`).join(', ');
  for (const p of profiles.slice(1)) {
    const t = sampleTypesOf(p);
    if (typeText(t) !== typeText(types)) {
      throw new ProfileMismatchError(`profiles with different sample types cannot be merged (${typeText(types)} and ${typeText(t)})`);
    }
    const h = headerOf(p);
    if (String(h.periodType) !== String(h0.periodType)) {
      throw new ProfileMismatchError(`profiles with different period types cannot be merged (${String(h0.periodType)} and ${String(h.periodType)})`);
    }
  }

  let timeNanos = 0n;
  let durationNanos = 0n;
  let period = 0n;
  const comments: string[] = [];
  let defaultSampleType = '';
  let docUrl = '';
  for (const p of profiles) {
    const h = headerOf(p);
    const t = toBig(h.timeNanos);
    if (timeNanos === 0n || t < timeNanos) timeNanos = t;
    durationNanos = BigInt.asIntN(64, durationNanos + toBig(h.durationNanos));
    if (period === 0n || period < toBig(h.period)) period = toBig(h.period);
    for (const c of h.comments) if (!comments.includes(c)) comments.push(c);
    if (defaultSampleType === '') defaultSampleType = h.defaultSampleType;
    if (docUrl === '') docUrl = h.docUrl;
  }

  const b = new ProfileBuilder();
  for (const p of profiles) {
    const src = b.source(p);
    if (b.mappings.length === 0 && p.mapping.length > 0) b.mapping(src, p.mapping[0]!.id);
    for (const s of p.sample) {
      if (s.value.every(isZero)) continue;
      const locs = s.locationId.map((id) => b.location(src, id));
      b.add(`${locs.join(',')}|${labelKey(p, s)}`, locs, s.value, b.labels(src, s));
    }
  }
  return b.build({
    sampleType: types,
    ...(h0.periodType ? { periodType: h0.periodType } : {}),
    period: canon(period),
    timeNanos: canon(timeNanos),
    durationNanos: canon(durationNanos),
    comments,
    defaultSampleType,
    dropFrames: h0.dropFrames,
    keepFrames: h0.keepFrames,
    docUrl,
  });
}
