/**
 * The record of who mapped what (native/src/resident.c), which the RSS breakdown rests on:
 * exact against a page model under random mappings, partial unmaps, shared mappings over
 * recorded ones and writes (test/native/fixtures/mappings.c), from one thread, two threads,
 * with a timer whose handler maps and unmaps, and across forks. The positive control is the
 * test-hooks build with munmap left out of the record (MP_TEST_RECORD_NO_CUT): the same
 * check must then fail.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fixture, runPreloaded } from '../helpers.js';
import { firstPass, mimallocLabel } from '../mimalloc.js';
import { buildTestHooks, KV, runUnder } from '../reliability/util.js';

const bin = () => fixture('mappings');

function exact(mode: string, ops = firstPass ? '100000' : '40000') {
  const r = runPreloaded(bin(), [mode, ops], {}, 120_000);
  assert.equal(r.signal, null, r.stderr);
  assert.equal(r.status, 0, r.stderr);
  return new KV(r.stdout);
}

for (const mode of ['single', 'threads', 'signals', 'fork']) {
  test(`the record equals the page model exactly: ${mode} (${mimallocLabel})`, (t) => {
    const kv = exact(mode);
    t.diagnostic(`${mode}: mapped ${kv.num('mapped')} resident ${kv.num('resident')} untracked ${kv.num('untracked')}`);
    assert.ok(kv.num('expected_mapped') > 0 && kv.num('expected_resident') > 0, 'the workload left nothing mapped');
    assert.equal(kv.num('mapped'), kv.num('expected_mapped'));
    assert.equal(kv.num('resident'), kv.num('expected_resident'));
    if (mode === 'fork') assert.equal(kv.num('children_ok'), 50);
  });
}

test('positive control: with munmap left out of the record (MP_TEST_RECORD_NO_CUT) the same check fails', (t) => {
  const r = runUnder(buildTestHooks(), bin(), ['single', '100000'], { MP_TEST_RECORD_NO_CUT: '1' }, 120_000);
  assert.equal(r.status, 0, r.stderr);
  const kv = new KV(r.stdout);
  t.diagnostic(`control caught: mapped ${kv.num('mapped')}, the model ${kv.num('expected_mapped')}`);
  assert.notEqual(kv.num('mapped'), kv.num('expected_mapped'));
});
