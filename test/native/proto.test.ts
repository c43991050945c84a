/** The profile.proto the library writes, decoded independently with pprof-format. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Profile } from '../../src/profile/pprof.js';

import { fixture, run, runPreloaded, tempDir } from '../helpers.js';

test('profile.proto: heap sample types, unsampled values, mappings with build IDs', () => {
  // a build ID asked for: the musl pass's musl-gcc (its specs' own link line) gives none by default
  const bin = fixture('sites', { flags: ['-Wl,--build-id'], variant: '-build-id' });
  const dir = tempDir();
  const r = runPreloaded(bin, [join(dir, 'p.heap'), join(dir, 'p.pb'), '0.05'], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_SAMPLE_INTERVAL: '65536',
    MIMALLOC_PROF_ACCUM: '1',
  });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout) as { estimated_live_bytes: number };
  const p = Profile.decode(readFileSync(join(dir, 'p.pb')));
  const str = (i: number | bigint) => p.stringTable.strings[Number(i)]!;
  assert.equal(str(0), '');
  assert.deepEqual(
    p.sampleType.map((t) => `${str(t.type)}/${str(t.unit)}`),
    ['alloc_objects/count', 'alloc_space/bytes', 'inuse_objects/count', 'inuse_space/bytes'],
  );
  assert.equal(str(p.defaultSampleType), 'inuse_space');
  assert.equal(`${str(p.periodType!.type)}/${str(p.periodType!.unit)}`, 'space/bytes');
  assert.equal(Number(p.period), 65536);

  let inuse = 0;
  for (const s of p.sample) {
    const v = s.value.map((x) => Number(BigInt.asIntN(64, BigInt(x))));
    assert.equal(v.length, 4);
    assert.ok(v[1]! >= v[3]!, 'allocated bytes are at least the in-use bytes (cumulative mode)');
    inuse += v[3]!;
    const label = s.label.find((l) => str(l.key) === 'bytes');
    assert.ok(label && Number(label.num) > 0 && str(label.numUnit) === 'bytes');
  }
  assert.ok(Math.abs(inuse - out.estimated_live_bytes) <= p.sample.length);

  // the main program first, with its real build ID
  const main = p.mapping[0]!;
  assert.equal(str(main.filename), bin);
  const notes = run('readelf', ['-n', bin]).stdout;
  const buildId = /Build ID: ([0-9a-f]+)/.exec(notes)?.[1];
  assert.ok(buildId);
  assert.equal(str(main.buildId), buildId);
  // every location that lies in a mapping points at it, at the call instruction (ra - 1)
  for (const loc of p.location) {
    const m = p.mapping.find((x) => x.id === loc.mappingId);
    if (m) assert.ok(Number(loc.address) >= Number(m.memoryStart) && Number(loc.address) < Number(m.memoryLimit));
  }
});
