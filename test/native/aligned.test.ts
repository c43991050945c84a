/** Aligned allocation keeps its promise: posix_memalign, aligned_alloc and memalign over
 * alignments 16 B .. 64 KiB and sizes around them, with the profiler stopped, sampling every
 * allocation, and with exact counters on. Found by the fuzz gate (docs/reliability.md):
 * mimalloc before 2.1.0 (Debian 12 ships 2.0.9) returns blocks of 256..1024 bytes aligned to
 * 128 only from mi_malloc_aligned; the library uses the _aligned_at forms (internal.h).
 * Control: the system mimalloc alone, preloaded, shows the defect where it has it (< 2.1; in
 * the arm64 pass Debian's arm64 package, under qemu); on musl, the mimalloc archive that the library links in, linked into the fixture alone. */
import assert from 'node:assert/strict';
import { dirname, join } from 'node:path';
import { test } from 'node:test';

import { fixture, run, runPreloaded, runTarget } from '../helpers.js';
import { headerMimallocVersion, mimallocLinkFlags, onMusl, systemMimalloc } from '../mimalloc.js';

const MODES: Record<string, Record<string, string>> = {
  stopped: {},
  sampled: { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '1' },
  events: { MIMALLOC_MEMORY_EVENTS: '1' },
};

const counts = (stdout: string) => ({
  checked: Number(/^checked=(\d+)$/m.exec(stdout)?.[1]),
  misaligned: Number(/^misaligned=(\d+)$/m.exec(stdout)?.[1]),
});

for (const [mode, env] of Object.entries(MODES)) {
  test(`every aligned block is aligned (${mode})`, () => {
    const r = runPreloaded(fixture('aligned'), [], env, 60_000);
    assert.equal(r.status, 0, r.stderr);
    const c = counts(r.stdout);
    assert.ok(c.checked > 1000, r.stdout);
    assert.equal(c.misaligned, 0, r.stdout);
  });
}

/** The version of the mimalloc archive that the library under test links in (the musl pass),
 * from its header: <prefix>/lib/libmimalloc.a, <prefix>/include/mimalloc.h. */
function staticMimallocVersion(archive: string): string {
  return headerMimallocVersion(join(dirname(dirname(archive)), 'include', 'mimalloc.h'));
}

// On musl the library has mimalloc linked in statically, and there is no musl build of the
// system's libmimalloc to preload: the control links the same archive into the fixture and
// calls it by the names its override would give posix_memalign, aligned_alloc and memalign.
test(`positive control: the ${onMusl ? 'linked-in' : 'system'} mimalloc 2.0.x alone returns misaligned blocks`, (t) => {
  const archive = process.env.MIMALLOC_PPROF_TEST_MIMALLOC_STATIC ?? '';
  if (onMusl && archive !== '') {
    const version = staticMimallocVersion(archive);
    if (!/^2\.0\./.test(version)) {
      t.skip(`the defect is that of mimalloc 2.0.x; the library links in ${version}`);
      return;
    }
    const names = ['posix_memalign', 'aligned_alloc', 'memalign', 'free'].map((f) => `-D${f}=mi_${f}`);
    const bin = fixture('aligned', { variant: '-mimalloc', flags: names, libs: [...mimallocLinkFlags, '-lmimalloc'] });
    const r = run(bin, [], {}, 60_000);
    const c = counts(r.stdout);
    t.diagnostic(`mimalloc ${version} alone: ${c.misaligned} of ${c.checked} blocks misaligned, e.g. ${/^bad=(.*)$/m.exec(r.stdout)?.[1]}`);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(c.misaligned > 0, r.stdout);
    return;
  }
  const system = systemMimalloc();
  if (system === null || !/^2\.0\./.test(system.version)) {
    t.skip(`the defect is that of mimalloc 2.0.x; this system has ${system?.version ?? 'another mimalloc'}`);
    return;
  }
  const version = system.version;
  const bin = fixture('aligned', { variant: '-plain', flags: ['-Wl,--no-as-needed', '-lc'] });
  const r = runTarget(bin, [], { LD_PRELOAD: system.path }, 60_000);
  const c = counts(r.stdout);
  t.diagnostic(`mimalloc ${version} alone: ${c.misaligned} of ${c.checked} blocks misaligned, e.g. ${/^bad=(.*)$/m.exec(r.stdout)?.[1]}`);
  assert.ok(c.misaligned > 0, r.stdout);
});
