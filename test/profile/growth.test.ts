/**
 * growth's interval against the sampling model it assumes, simulated: each allocation of
 * size s is sampled with probability q = 1 − e^(−s/R) (the exponential byte-interval
 * sampler's), and a sampled block stays in every later profile while it lives, weighted 1/q.
 * Over 20 seeds: the leak (1 MiB/s) is significant every time and its true slope lies in the
 * 95 % interval at least 17 times (the interval is conservative; P(≤ 16 of 20) at exactly 95 %
 * coverage is 1.6 %); a function that keeps replacing 16 MiB is called growing at most once.
 * Controls: without the sampling part of the interval (residuals only) the steady function
 * is called growing more often than that; without the allocated figures the interval falls
 * back to the wider Cauchy–Schwarz bound.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { growth } from '../../src/profile/growth.js';
import { HEAP_TYPES, makeProfile, rng } from './util.js';

const R = 512 * 1024;
const BLOCK = 64 * 1024;
const MiB = 1 << 20;

/**
 * Nine profiles, one a second, with in-use and allocated figures, of a process where `leaky`
 * keeps one 1 MiB block more each second and `steady` holds 256 blocks of 64 KiB (16 MiB)
 * and replaces 50 of them each second.
 */
function series(seed: number, withLeak: boolean) {
  const random = rng(seed);
  const q = (size: number) => -Math.expm1(-size / R);
  const sampled = (size: number) => random() < q(size);
  let leakSampled = 0;
  const steady = Array.from({ length: 256 }, () => sampled(BLOCK));
  let steadyAllocated = steady.filter(Boolean).length;
  const profiles = [];
  for (let t = 0; t <= 8; t++) {
    if (t > 0) {
      if (withLeak && sampled(MiB)) leakSampled++;
      for (let i = 0; i < 50; i++) {
        const hit = sampled(BLOCK);
        steady[Math.floor(random() * 256)] = hit;
        if (hit) steadyAllocated++;
      }
    }
    // alloc_objects, alloc_space, inuse_objects, inuse_space: each sampled block weighted 1/q
    const row = (allocated: number, live: number, size: number) => [allocated / q(size), (allocated * size) / q(size), live / q(size), (live * size) / q(size)];
    const steadyLive = steady.filter(Boolean).length;
    const p = makeProfile({
      types: HEAP_TYPES,
      period: R,
      samples: [
        ...(leakSampled > 0 ? [{ stack: ['leaky', 'main'], values: row(leakSampled, leakSampled, MiB) }] : []),
        { stack: ['steady', 'main'], values: row(steadyAllocated, steadyLive, BLOCK) },
      ],
    });
    p.timeNanos = BigInt(1_700_000_000 + t) * 1_000_000_000n;
    profiles.push({ profile: p, name: `t${t}` });
  }
  return profiles;
}

test('the leak is significant with its slope inside the interval; the steady function is not growing (20 seeds)', () => {
  let covered = 0;
  let falseGrowth = 0;
  for (let seed = 1; seed <= 20; seed++) {
    const g = growth(series(seed, true));
    const leak = g.functions.find((f) => f.name === 'leaky')!;
    assert.ok(leak.significant, `seed ${seed}: the leak is not significant (${JSON.stringify(leak)})`);
    if (leak.low <= MiB && MiB <= leak.high) covered++;
    const steadyOnly = growth(series(1000 + seed, false)).functions.find((f) => f.name === 'steady')!;
    if (steadyOnly.significant) falseGrowth++;
  }
  console.log(`# 20 seeds: true slope inside the interval ${covered} times; steady called growing ${falseGrowth} times`);
  assert.ok(covered >= 17, `the true slope was inside the interval ${covered} times of 20`);
  assert.ok(falseGrowth <= 1, `the steady function was called growing ${falseGrowth} times of 20`);
});

test('controls: residuals alone call the steady function growing more often; without the allocated figures the interval is wider', () => {
  let falseGrowth = 0;
  let widerWithout = 0;
  for (let seed = 1; seed <= 20; seed++) {
    // only inuse_space: growth then knows no sampling variance, the fit's scatter is all it has
    const bare = series(1000 + seed, false).map(({ profile, name }) => {
      profile.sampleType = profile.sampleType.slice(3);
      for (const s of profile.sample) s.value = s.value.slice(3);
      return { profile, name };
    });
    if (growth(bare).functions.find((f) => f.name === 'steady')!.significant) falseGrowth++;
    // in use only (no alloc_*): the Cauchy–Schwarz bound, which is never the narrower
    const full = growth(series(seed, true)).functions.find((f) => f.name === 'leaky')!;
    const inuse = growth(
      series(seed, true).map(({ profile, name }) => {
        profile.sampleType = profile.sampleType.slice(2);
        for (const s of profile.sample) s.value = s.value.slice(2);
        return { profile, name };
      }),
    ).functions.find((f) => f.name === 'leaky')!;
    if (inuse.high - inuse.low > full.high - full.low) widerWithout++;
  }
  console.log(`# controls: residuals alone called the steady function growing ${falseGrowth} times of 20; the in-use-only bound was wider ${widerWithout} times`);
  assert.ok(falseGrowth >= 2, `without the sampling part, still only ${falseGrowth} false calls of 20`);
  assert.ok(widerWithout >= 18, `the step bound was narrower in only ${widerWithout} of 20`);
});

test('growth refuses what it cannot order', () => {
  const [a, b] = series(1, true);
  assert.throws(() => growth([a!]), /at least two profiles/);
  b!.profile.timeNanos = a!.profile.timeNanos;
  assert.throws(() => growth([a!, b!]), /taken at the same time/);
  b!.profile.timeNanos = 0;
  assert.throws(() => growth([a!, b!]), /has no time/);
});

test('the total is fitted as each row is: its series is the totals, its slope the leak\'s and the steady set\'s together (20 seeds)', () => {
  let covered = 0;
  for (let seed = 1; seed <= 20; seed++) {
    const g = growth(series(seed, true));
    const leak = g.functions.find((f) => f.name === 'leaky')!;
    const steady = g.functions.find((f) => f.name === 'steady')!;
    // a fit is linear in its series: the total's slope is the sum of the two functions'
    assert.ok(Math.abs(g.total.bytesPerSecond - (leak.bytesPerSecond + steady.bytesPerSecond)) <= 1e-6 * MiB, `seed ${seed}`);
    assert.ok(g.total.low <= g.total.bytesPerSecond && g.total.bytesPerSecond <= g.total.high);
    if (g.total.low <= MiB && MiB <= g.total.high) covered++;
  }
  // the same coverage rule as the rows' (a 95 % interval: 17 of 20 at least)
  assert.ok(covered >= 17, `the true slope was inside the total's interval ${covered} times of 20`);
});
