/**
 * The unwind tables' pages a walk read go back a burst at a time, so a range can stay pending
 * for 20 ms or more (native/src/unwind.c): meanwhile its library may be unloaded and its
 * addresses mapped again, as the program's own memory, which a madvise(MADV_DONTNEED) would
 * zero. fixtures/unload.c samples through a library with large tables (fixtures/unload_lib.c),
 * unloads it, maps anonymous memory at its addresses, fills it, lets the pending pages go
 * back, and reads it again. The control (MP_TEST_UNWIND_NO_RECHECK, test-hooks build) skips
 * asking the loader again before the madvise, and the program's memory is zeroed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fixture, runPreloaded } from '../helpers.js';
import { mimallocLabel, onCross, onMusl } from '../mimalloc.js';
import { buildTestHooks, runUnder } from '../reliability/util.js';

const skip =
  (onMusl && 'musl: the table-driven unwinder, which reads and hands back the tables, is built for glibc only') ||
  (onCross &&
    "arm64: Debian's binutils keep .eh_frame in the executable segment, whose pages are never handed back (unwind.c givable_range)");
const ENV = { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096' };

function program(): [string, string] {
  const lib = fixture('unload_lib', { flags: ['-shared', '-fPIC'], variant: '.so' });
  return [fixture('unload', { libs: ['-ldl'] }), lib];
}

/** The fixture's verdict: 'intact', or 'zeroed <pages>' (77: its addresses were taken). */
function verdict(r: { status: number | null; stdout: string; stderr: string }): string {
  if (r.status === 77) return 'not remapped';
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

test(`a library unloaded while its tables' pages are pending: the memory mapped at its addresses keeps its bytes; the control zeroes them (${mimallocLabel})`, { skip }, (t) => {
  const [exe, lib] = program();
  const runs = { production: [] as string[], hooks: [] as string[], control: [] as string[] };
  for (let i = 0; i < 3; i++) {
    runs.production.push(verdict(runPreloaded(exe, [lib], ENV)));
    runs.hooks.push(verdict(runUnder(buildTestHooks(), exe, [lib], ENV)));
    runs.control.push(verdict(runUnder(buildTestHooks(), exe, [lib], { ...ENV, MP_TEST_UNWIND_NO_RECHECK: '1' })));
  }
  t.diagnostic(JSON.stringify(runs));
  if ([...runs.production, ...runs.hooks, ...runs.control].every((v) => v === 'not remapped')) {
    t.skip('the library\'s addresses were taken by another mapping in every run');
    return;
  }
  for (const v of [...runs.production, ...runs.hooks]) assert.ok(v === 'intact' || v === 'not remapped', v);
  assert.ok(runs.control.some((v) => v.startsWith('zeroed ')), `the control left the memory intact: ${runs.control.join(', ')}`);
});
