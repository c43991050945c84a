/** A peak profile says "at the peak" (src/profile/peak.ts, issue 29 (6)): the estimate's standard
 * error from its live samples, when the peak was reached, the profile's time set to it. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Profile, Sample, ValueType } from '../../src/profile/pprof.js';

import { humanBytes } from '../../src/cli/top.js';
import { annotatePeak, peakOf } from '../../src/profile/peak.js';

const MiB = 1 << 20;

function profile(comments: string[]): Profile {
  const p = new Profile();
  const t = (type: string, unit: string) => new ValueType({ type: p.stringTable.dedup(type), unit: p.stringTable.dedup(unit) });
  p.sampleType = [t('inuse_objects', 'count'), t('inuse_space', 'bytes')];
  p.period = 524288;
  // 64 blocks of 1 MiB (as the estimate stands: count and bytes), 10 of 64 KiB
  p.sample = [new Sample({ locationId: [], value: [64, 64 * MiB] }), new Sample({ locationId: [], value: [10, 640 * 1024] })];
  for (const c of comments) p.comment.push(p.stringTable.dedup(c));
  return p;
}

test('the peak: its figure, its standard error (N s²(1−q)/q) and when; the comment and the time say so', () => {
  const at = Date.UTC(2026, 11, 4, 18, 0, 0, 123);
  const p = profile([`peak: estimated_in_use_bytes=${64 * MiB + 640 * 1024} at_unix_ms=${at}`]);
  const v = (s: number, n: number) => {
    const q = -Math.expm1(-s / 524288);
    return (n * s * s * (1 - q)) / q; // N blocks: E[Σ over the sampled s²(1−q)/q²] = N s²(1−q)/q
  };
  const peak = annotatePeak(p, humanBytes, at - 2500);
  assert.ok(peak);
  assert.equal(peak.bytes, 64 * MiB + 640 * 1024);
  assert.ok(Math.abs(peak.stdError - Math.sqrt(v(MiB, 64) + v(64 * 1024, 10))) < 1);
  assert.equal(peak.atUnixMs, at);
  assert.equal(Number(p.timeNanos), at * 1e6);
  const said = p.comment.map((c) => p.stringTable.strings[Number(c)] ?? '').filter((c) => c.startsWith('at the peak: '));
  assert.equal(said.length, 1);
  assert.match(said[0]!, /at the peak: .*64\.6MiB ± 3\.\d+MiB \(1 standard error\), reached 2026-12-04T18:00:00\.123Z \(2\.5 s after the run started\)$/);
  // once only
  annotatePeak(p, humanBytes);
  assert.equal(p.comment.filter((c) => (p.stringTable.strings[Number(c)] ?? '').startsWith('at the peak: ')).length, 1);
});

test('control: a profile that is not a peak profile is left alone', () => {
  const p = profile(['mimalloc-pprof interval=524288']);
  assert.equal(peakOf(p), undefined);
  assert.equal(annotatePeak(p, humanBytes), undefined);
  assert.equal(p.comment.length, 1);
  assert.equal(Number(p.timeNanos ?? 0), 0);
});
