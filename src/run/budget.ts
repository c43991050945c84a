/**
 * Memory budgets for a whole program (`run --max-in-use SIZE`, `run --max-peak SIZE`): the run
 * fails when the profile shows, beyond reasonable doubt, more memory in use than the budget.
 *
 * The in-use figure is an estimate (Horvitz–Thompson over the sampled blocks, each standing for
 * 1/q of its size, q = 1 − e^(−size/R)) with a standard error from the same samples
 * (src/profile/growth.ts rowVariance: Σ n·s²(1−q)/q² per row). A run fails only when the
 * one-sided 95 % lower bound, estimate − 1.645 standard errors, is above the budget: a program
 * whose true figure is at or under the budget fails in at most 5 % of runs (less the further
 * under), whatever the interval; a smaller interval makes the bound tighter, so a leak just
 * over the budget is caught more often.
 */
import type { Profile } from '../profile/pprof.js';

import { rowVariance } from '../profile/growth.js';

/** z of a one-sided 95 % bound. */
export const Z_95_ONE_SIDED = 1.6448536269514722;

export interface Estimate {
  bytes: number;
  stdError: number;
}

/** The in-use estimate of a profile (both heaps, as its default view sums them) and its standard error. */
export function inUseEstimate(profile: Profile): Estimate {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const types = profile.sampleType.map((t) => str(t.type));
  const space = types.indexOf('inuse_space');
  const objects = types.indexOf('inuse_objects');
  const period = Number(profile.period ?? 0);
  let bytes = 0;
  let variance = 0;
  if (space < 0) return { bytes: 0, stdError: 0 };
  for (const s of profile.sample) {
    const b = Number(s.value[space] ?? 0);
    bytes += b;
    if (objects >= 0) variance += rowVariance(b, Number(s.value[objects] ?? 0), period);
  }
  return { bytes, stdError: Math.sqrt(variance) };
}

/** The lower end of the one-sided 95 % interval. */
export function lowerBound(e: Estimate): number {
  return e.bytes - Z_95_ONE_SIDED * e.stdError;
}

/** Whether an estimate is over `budget` beyond reasonable doubt. */
export function overBudget(e: Estimate, budget: number): boolean {
  return lowerBound(e) > budget;
}
