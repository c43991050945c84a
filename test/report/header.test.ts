/** The report's header says what kind of point a profile is and where its figures are
 * estimates: a peak profile says "at the peak" (with its estimate's standard error and when),
 * and an RSS breakdown whose parts came to more than the resident set says by how much, since
 * no part is shown below 0 (profile/rss.ts). The control: the same profile without those
 * comments has neither row. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';

import { readProfileFile } from '../../src/profile/files.js';
import { AT_THE_PEAK } from '../../src/profile/peak.js';
import { formatRssComment } from '../../src/profile/rss.js';
import { profileData } from '../../src/report/data.js';
import { cliFixtures } from '../cli/util.js';

const MiB = 1 << 20;

function header(comments: string[]): Map<string, string> {
  const p = readProfileFile(join(cliFixtures(), 'demo.pb.gz'));
  for (const c of comments) p.comment.push(p.stringTable.dedup(c));
  return new Map(profileData(p, 'demo.pb.gz').header);
}

test('a peak profile says so in the header, and a breakdown whose parts overcount says by how much', () => {
  const peak = `${AT_THE_PEAK}the in-use figures are those of the high-water mark: 204MiB ± 5.71MiB (1 standard error), reached 2026-12-04T18:00:00.000Z`;
  const rss = formatRssComment({
    rss: 100 * MiB, runtime: 60 * MiB, v8Used: 40 * MiB, v8Committed: 50 * MiB, nativeInUse: 30 * MiB, nativeStdError: MiB, allocatorOverhead: 0, nativeNotResident: 2 * MiB,
    profiler: MiB, code: 10 * MiB, stacks: 0, other: -MiB,
  });
  const h = header([peak, rss]);
  assert.match(h.get('at the peak') ?? '', /204MiB ± 5\.71MiB .* reached 2026-12-04/);
  assert.match(h.get('resident set by part') ?? '', /other 0 B/);
  assert.match(h.get('parts beyond the resident set') ?? '', /^1\.00 MiB /);
  assert.match(h.get('native in use not resident') ?? '', /^2\.00 MiB /);
});

test('positive control: without those comments the header has neither row', () => {
  const h = header([]);
  assert.equal(h.get('at the peak'), undefined);
  assert.equal(h.get('parts beyond the resident set'), undefined);
});
