/** A SIGTERM that lands on a thread with little stack left still ends the process by SIGTERM
 * with its profile written: the library's handler writes the dump on that thread's remaining
 * stack, so the dump path keeps its own frames small (its file names and output buffer are
 * mapped, /proc is read in small pieces). The room given is what a handler of the program's
 * own costs there (the kernel's signal frame and pause's: 3.7 KiB on this x86-64 machine, 4.6
 * KiB on arm64, as the fixture measures it), plus 4 KiB for the library. On x86-64 the text dump
 * needs 1-2 KiB of it and the proto one 2-3 KiB; the library before this test needed 7-8 KiB and
 * crashed (SIGSEGV, no profile). Controls: without the library
 * SIGTERM ends the fixture in the same room (the default action needs no stack), and a dump that
 * takes 4 KiB more of it (the test-hooks build's MP_TEST_DUMP_STACK_HOG=1, about what the
 * names and reads took before) does not fit: the room the test gives is tight. */
import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { fixture, runPreloaded, runTarget, tempDir } from '../helpers.js';
import { onCross, onMusl } from '../mimalloc.js';
import { buildTestHooks } from '../reliability/util.js';

// The controls' room is calibrated on x86-64 glibc; under qemu-user the emulator's own signal
// delivery and on musl the thread's own start differ, and the controls there say nothing
const CONTROLS_HERE_ONLY = onCross || onMusl ? 'the controls are calibrated for x86-64 glibc (qemu-user delivers signals itself; musl starts threads differently)' : false;

// bound at load: a lazy binding of pause() at the deepest frame would itself take ~3 KiB (the xsave area)
const bin = () => fixture('signal_stack', { flags: ['-Wl,-z,now'] });
const LIBRARY_ROOM = 4096;

/** What a handler costs on a thread waiting in pause(): measured by a handler of the program's. */
function handlerFrame(): number {
  const r = runTarget(bin(), ['32768', 'measure']);
  const frame = Number(/frame=(\d+)/.exec(r.stdout)?.[1]);
  assert.ok(r.status === 0 && frame > 0 && frame < 16384, `the handler's frame: ${r.stdout}${r.stderr}`);
  return frame;
}

function underLibrary(left: number, format: 'text' | 'proto', env: Record<string, string> = {}) {
  const out = join(tempDir('mpp-sigstack-'), format === 'proto' ? 'p.pb' : 'p.heap');
  const r = runPreloaded(bin(), [String(left)], {
    MIMALLOC_PROF: '1',
    MIMALLOC_PROF_DUMP_AT_EXIT: out,
    ...(format === 'proto' ? { MIMALLOC_PROF_DUMP_FORMAT: 'proto' } : {}),
    ...env,
  });
  return { r, written: existsSync(out) && statSync(out).size > 0 };
}

for (const format of ['text', 'proto'] as const) {
  test(`SIGTERM on a thread with a handler's frame and 4 KiB of stack left: the ${format} profile is written and the process ends by SIGTERM`, (t) => {
    const frame = handlerFrame();
    t.diagnostic(`a handler costs ${frame} bytes here`);
    const { r, written } = underLibrary(frame + LIBRARY_ROOM, format);
    assert.equal(r.signal, 'SIGTERM', `ended by ${r.signal ?? `status ${r.status}`}: ${r.stderr}`);
    assert.ok(written, 'the profile was written');
  });
}

test('controls: without the library the fixture ends by SIGTERM in the same room; a dump that takes 4 KiB more (MP_TEST_DUMP_STACK_HOG=1) does not fit', { skip: CONTROLS_HERE_ONLY }, () => {
  const room = handlerFrame() + LIBRARY_ROOM;
  const plain = runTarget(bin(), [String(room)]);
  assert.equal(plain.signal, 'SIGTERM');
  const hooks = join(buildTestHooks(), 'libmimalloc-pprof.so');
  const tight = underLibrary(room, 'text', { LD_PRELOAD: hooks, MP_TEST_DUMP_STACK_HOG: '1' });
  assert.notEqual(tight.r.signal, 'SIGTERM', 'a dump 4 KiB deeper fitted: the room under test is not tight');
  const roomy = underLibrary(room, 'text', { LD_PRELOAD: hooks });
  assert.equal(roomy.r.signal, 'SIGTERM', 'the test-hooks build itself fits');
});
