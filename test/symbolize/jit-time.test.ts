/**
 * Samples name their JavaScript frames by the perf map as it stood when their stacks were
 * taken (the jit_map_bytes label the preload library writes, native/src/jitmap.c): two samples
 * whose frames share one JIT address that V8 gave to other code in between are named each by
 * its own time; the label is gone from the result. The control: without the labels both take
 * the newest name, which is what misnamed a frame before.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Label, Location, type Profile } from '../../src/profile/pprof.js';

import { symbolize } from '../../src/symbolize/index.js';
import { makeProfile } from '../profile/util.js';
import { tempDir } from '../helpers.js';

const first = '7f0000001000 378 JS:~openStreams /app/pool.cjs:11:21\n';
const later = '7f0000001000 378 JS:~get node:internal/console/constructor:212:14\n';

function profileAt(labels: (number | undefined)[]): Profile {
  const p = makeProfile({ samples: labels.map(() => ({ stack: ['leaf'], values: [0, 0, 1, 100] })) });
  // one raw JIT frame above each sample's leaf: an address no file maps
  const jit = new Location({ id: p.location.reduce((a, l) => Math.max(a, Number(l.id)), 0) + 1, address: 0x7f0000001080 });
  p.location.push(jit);
  const key = p.stringTable.dedup('jit_map_bytes');
  labels.forEach((bytes, i) => {
    const s = p.sample[i]!;
    s.locationId = [...s.locationId, jit.id];
    if (bytes !== undefined) s.label = [...s.label, new Label({ key, num: bytes })];
  });
  return p;
}

function jitNames(p: Profile): string[] {
  const str = (x: number | bigint) => p.stringTable.strings[Number(x)] ?? '';
  const fn = new Map(p.function.map((f) => [Number(f.id), str(f.name)]));
  const loc = new Map(p.location.map((l) => [Number(l.id), l.line.length ? fn.get(Number(l.line[0]!.functionId)) : '?']));
  return p.sample.map((s) => loc.get(Number(s.locationId[s.locationId.length - 1]))!);
}

test('each sample names its JIT frame by the map at its own time; the label is not kept', () => {
  const path = join(tempDir('mpp-jit-time-'), 'perf-1.map');
  writeFileSync(path, first + later);
  const p = profileAt([Buffer.byteLength(first), Buffer.byteLength(first + later)]);
  symbolize(p, { perfMapPath: path });
  assert.deepEqual(jitNames(p), ['openStreams', 'get']);
  const key = p.stringTable.strings.indexOf('jit_map_bytes');
  assert.ok(p.sample.every((s) => s.label.every((l) => Number(l.key) !== key)), 'jit_map_bytes dropped');
  const ids = new Set(p.location.map((l) => Number(l.id)));
  assert.equal(ids.size, p.location.length, 'location ids stay unique');
  assert.ok(p.sample.every((s) => s.locationId.every((id) => ids.has(Number(id)))));
});

test('control: without the labels both samples take the newest name', () => {
  const path = join(tempDir('mpp-jit-time-'), 'perf-1.map');
  writeFileSync(path, first + later);
  const p = profileAt([undefined, undefined]);
  symbolize(p, { perfMapPath: path });
  assert.deepEqual(jitNames(p), ['get', 'get']);
});
