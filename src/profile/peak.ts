/**
 * A peak profile (`run --peak`, `profile({ peak: true })`, `?peak=1`) holds the in-use figures
 * as they stood at the high-water mark of the estimated in-use bytes, not at the moment it was
 * written. The preload library records how much that was and when (the comment
 * `peak: estimated_in_use_bytes=… at_unix_ms=…`, native/src/proto.c); this adds what a reader
 * needs to take the figure for what it is: the estimate's standard error, from the peak's own
 * live samples (Horvitz–Thompson, as growth.ts: Σ n·s²(1−q)/q² over the rows, q = 1 − e^(−s/R)),
 * and one comment that says "at the peak" with both. The profile's time becomes the peak's, so
 * `go tool pprof`'s `Time:` and the report's "taken" say when the figures were true.
 */
import type { Profile } from './pprof.js';

import { rowVariance } from './growth.js';

export interface PeakInfo {
  /** The estimated in-use bytes at the peak (the library's figure, else the samples' sum). */
  bytes: number;
  /** The estimate's standard error, from the peak's live samples. */
  stdError: number;
  /** When the peak was reached (Unix ms), when recorded. */
  atUnixMs?: number;
}

const PREFIX = 'peak: ';
export const AT_THE_PEAK = 'at the peak: ';

const num = (v: number | bigint | undefined) => Number(v ?? 0);

/** The peak a profile records (undefined: not a peak profile). */
export function peakOf(profile: Profile): PeakInfo | undefined {
  const strings = profile.stringTable.strings;
  const comment = profile.comment.map((i) => strings[Number(i)] ?? '').find((c) => c.startsWith(PREFIX));
  if (comment === undefined) return undefined;
  const field = (k: string) => Number(new RegExp(`\\b${k}=(-?\\d+)`).exec(comment)?.[1]);
  const types = profile.sampleType.map((t) => strings[Number(t.type)] ?? '');
  const space = types.indexOf('inuse_space');
  const objects = types.indexOf('inuse_objects');
  const period = num(profile.period);
  let variance = 0;
  let sum = 0;
  for (const s of profile.sample) {
    if (space < 0) break;
    const b = num(s.value[space]);
    sum += b;
    if (objects >= 0) variance += rowVariance(b, num(s.value[objects]), period);
  }
  const recorded = field('estimated_in_use_bytes');
  const at = field('at_unix_ms');
  return { bytes: Number.isFinite(recorded) ? recorded : sum, stdError: Math.sqrt(variance), ...(Number.isFinite(at) && at > 0 ? { atUnixMs: at } : {}) };
}

/** "204MiB ± 9.5MiB (1 standard error), reached 2026-12-04T18:39:01.123Z (1.2 s after the run started)". */
export function formatPeak(peak: PeakInfo, human: (n: number) => string, startedUnixMs?: number): string {
  let s = `${human(peak.bytes)} ± ${human(peak.stdError)} (1 standard error)`;
  if (peak.atUnixMs !== undefined) {
    s += `, reached ${new Date(peak.atUnixMs).toISOString()}`;
    if (startedUnixMs !== undefined && peak.atUnixMs >= startedUnixMs) s += ` (${((peak.atUnixMs - startedUnixMs) / 1000).toFixed(1)} s after the run started)`;
  }
  return s;
}

/**
 * Marks a peak profile as one (in place): a comment `at the peak: …` with the estimate, its
 * standard error and when it was reached, and the profile's time set to the peak's. Returns
 * the peak, or undefined (the profile is left alone) for a profile that records none.
 */
export function annotatePeak(profile: Profile, human: (n: number) => string, startedUnixMs?: number): PeakInfo | undefined {
  const peak = peakOf(profile);
  if (!peak) return undefined;
  const strings = profile.stringTable;
  if (!profile.comment.some((i) => (strings.strings[Number(i)] ?? '').startsWith(AT_THE_PEAK))) {
    profile.comment.push(
      strings.dedup(`${AT_THE_PEAK}the in-use figures are those of the high-water mark of the estimated in-use bytes, not of the end: ${formatPeak(peak, human, startedUnixMs)}`),
    );
  }
  if (peak.atUnixMs !== undefined) profile.timeNanos = BigInt(peak.atUnixMs) * 1_000_000n;
  return peak;
}
