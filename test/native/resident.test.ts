/**
 * The record of who mapped what (native/src/resident.c), which the RSS breakdown rests on:
 * exact against a page model under random mappings, partial unmaps, shared mappings over
 * recorded ones and writes (test/native/fixtures/mappings.c), from one thread, two threads,
 * with a timer whose handler maps and unmaps, and across forks. The positive control is the
 * test-hooks build with munmap left out of the record (MP_TEST_RECORD_NO_CUT): the same
 * check must then fail.
 *
 * Then hostile mappings (test/native/fixtures/hostile_mappings.c): munmap with lengths short of
 * the page, mremap in place, moved, onto a recorded range and with MREMAP_DONTUNMAP, MAP_FIXED
 * of shared, file and private memory over recorded ranges, each step checked; and threads that
 * churn mappings (munmap/mmap, and mremap) so that the kernel hands one the addresses another
 * has just freed (defect n7), checked exact at every barrier. Each has its control in the
 * test-hooks build: MP_TEST_RESIDENT_NO_ROUND (lengths as given), MP_TEST_RESIDENT_NO_REMAP
 * (mremap not followed), MP_TEST_RESIDENT_FIXED_NO_CUT (MAP_FIXED of a file or shared memory
 * leaves the record alone), MP_TEST_RESIDENT_CUT_AFTER (the old order: what munmap and mremap
 * free is cut after the system call, so the churn loses a mapping another thread just made).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fixture, runPreloaded } from '../helpers.js';
import { firstPass, mimallocLabel, onCross, onMusl, QEMU_NO_ADDRESS_REUSE } from '../mimalloc.js';
import { buildTestHooks, KV, runUnder } from '../reliability/util.js';

/** Every check here reads the record, which the musl build does not keep. */
const skip =
  onMusl &&
  'musl: the library keeps no record of mappings there (it interposes mmap, munmap and mremap on glibc only: native/src/interpose.c)';

const bin = () => fixture('mappings');

function exact(mode: string, ops = firstPass ? '100000' : '40000') {
  const r = runPreloaded(bin(), [mode, ops], {}, 120_000);
  assert.equal(r.signal, null, r.stderr);
  assert.equal(r.status, 0, r.stderr);
  return new KV(r.stdout);
}

for (const mode of ['single', 'threads', 'signals', 'fork']) {
  test(`the record equals the page model exactly: ${mode} (${mimallocLabel})`, { skip }, (t) => {
    const kv = exact(mode);
    t.diagnostic(`${mode}: mapped ${kv.num('mapped')} resident ${kv.num('resident')} untracked ${kv.num('untracked')}`);
    assert.ok(kv.num('expected_mapped') > 0 && kv.num('expected_resident') > 0, 'the workload left nothing mapped');
    assert.equal(kv.num('mapped'), kv.num('expected_mapped'));
    assert.equal(kv.num('resident'), kv.num('expected_resident'));
    if (mode === 'fork') assert.equal(kv.num('children_ok'), 50);
  });
}

test('positive control: with munmap left out of the record (MP_TEST_RECORD_NO_CUT) the same check fails', { skip }, (t) => {
  const r = runUnder(buildTestHooks(), bin(), ['single', '100000'], { MP_TEST_RECORD_NO_CUT: '1' }, 120_000);
  assert.equal(r.status, 0, r.stderr);
  const kv = new KV(r.stdout);
  t.diagnostic(`control caught: mapped ${kv.num('mapped')}, the model ${kv.num('expected_mapped')}`);
  assert.notEqual(kv.num('mapped'), kv.num('expected_mapped'));
});

const hostile = () => fixture('hostile_mappings');

/** step_NAME=recorded/expected lines: the steps whose figures differ. */
function wrongSteps(stdout: string): string[] {
  return [...stdout.matchAll(/^step_(\w+)=(\d+)\/(\d+)$/gm)].filter((m) => m[2] !== m[3]).map((m) => m[1]!);
}

test(`hostile shapes: partial munmap, mremap, MAP_FIXED over recorded ranges, each step exact (${mimallocLabel})`, { skip }, () => {
  const r = runPreloaded(hostile(), ['shapes'], {}, 30_000);
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(wrongSteps(r.stdout), [], r.stdout);
  assert.equal(new KV(r.stdout).num('shape_failures'), 0);
  assert.ok(/^step_mremap_move_grow=/m.test(r.stdout) && /^step_map_fixed_private_past_end=/m.test(r.stdout), r.stdout);
});

const shapeControls: [string, RegExp][] = [
  ['MP_TEST_RESIDENT_NO_ROUND', /^munmap_(100_bytes|page_plus_1|1_byte)$/],
  ['MP_TEST_RESIDENT_NO_REMAP', /^mremap_(grow_in_place|shrink_in_place|move_grow|fixed_onto_recorded|merged_pair)$/],
  ['MP_TEST_RESIDENT_FIXED_NO_CUT', /^map_fixed_(shared|file)$/],
];
for (const [hook, steps] of shapeControls) {
  test(`positive control: with ${hook} the shapes' steps it breaks differ`, { skip }, (t) => {
    const r = runUnder(buildTestHooks(), hostile(), ['shapes'], { [hook]: '1' }, 30_000);
    assert.equal(r.status, 0, r.stderr);
    const wrong = wrongSteps(r.stdout);
    t.diagnostic(`${hook}: wrong steps ${wrong.join(' ')}`);
    assert.ok(wrong.filter((s) => steps.test(s)).length >= 2, `${hook} went unnoticed:\n${r.stdout}`);
  });
}

/** One churn run: THREADS threads for SECONDS (stops at the first difference). */
function churn(libDir: string | null, mode: string, threads: number, seconds: number, env: Record<string, string> = {}) {
  const args = [mode, String(threads), String(seconds)];
  const r = libDir === null ? runPreloaded(hostile(), args, env, 30_000) : runUnder(libDir, hostile(), args, env, 30_000);
  assert.equal(r.signal, null, r.stderr);
  assert.equal(r.status, 0, r.stderr);
  return new KV(r.stdout);
}

// Four threads on the two cores: threads preempted between a system call and the record.
for (const mode of ['churn', 'remap']) {
  test(`hostile ${mode}: concurrent ${mode === 'churn' ? 'munmap/mmap' : 'mremap/munmap/mmap'} leaves the record exact at every barrier (${mimallocLabel})`, { skip }, (t) => {
    const runs = firstPass ? 3 : 2;
    for (let i = 0; i < runs; i++) {
      const kv = churn(null, mode, 4, 3);
      t.diagnostic(`${mode} run ${i}: ${kv.num('checks')} checks over ${kv.num('rounds')} replacements, mismatch ${kv.num('mismatch')}`);
      assert.equal(kv.num('mismatch'), 0, `recorded ${kv.num('recorded')} of ${kv.num('live')} live bytes:\n${kv.text}`);
      assert.ok(kv.num('checks') >= 50, `too few checks to mean anything:\n${kv.text}`);
      assert.equal(kv.num('end_recorded'), 0, 'everything unmapped, something still recorded');
    }
  });

  test(`positive control: ${mode} with the cut after the system call (MP_TEST_RESIDENT_CUT_AFTER) loses a mapping`, { skip: skip || (onCross && QEMU_NO_ADDRESS_REUSE) }, (t) => {
    const lib = buildTestHooks();
    let caught = '';
    for (let i = 0; i < 5 && caught === ''; i++) {
      const kv = churn(lib, mode, 4, 4, { MP_TEST_RESIDENT_CUT_AFTER: '1' });
      if (kv.num('mismatch') === 1) caught = `run ${i}, check ${kv.num('checks')}: recorded ${kv.num('recorded')} of ${kv.num('live')}`;
    }
    t.diagnostic(`control caught: ${caught}`);
    assert.notEqual(caught, '', 'the old order never lost a mapping: the churn does not reach the race');
  });
}

test('positive control: remap with mremap not followed (MP_TEST_RESIDENT_NO_REMAP) differs', { skip }, () => {
  const kv = churn(buildTestHooks(), 'remap', 4, 4, { MP_TEST_RESIDENT_NO_REMAP: '1' });
  assert.equal(kv.num('mismatch'), 1, kv.text);
});
