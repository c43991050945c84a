/**
 * Direct binding (native/src/bind.c): while profiling, the program's PLT slots for the hot
 * allocation names point at the watching entry points; stopped, at the exported ones again.
 * Seen from the program itself (fixtures/direct_bind.c reads its own slots and those of a
 * dlopen'ed library): a lazily bound executable, one with full RELRO (read-only slots, not
 * PIE), profiling started at load or by the API, 300 start/stop switches while two threads
 * allocate and the library is unloaded and loaded again between switches, and a fork child
 * that stops on its own. The control, MIMALLOC_PROF_DIRECT=0, leaves every slot exported,
 * which the same checks tell apart.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fixture, runPreloaded } from '../helpers.js';
import { mimallocLabel, onMusl } from '../mimalloc.js';

/** bind.c is compiled for glibc only (its #if): on musl every slot keeps the exported target. */
const MUSL_NO_BIND = 'musl: the direct PLT binding (native/src/bind.c) is built for glibc only';

const NAMES = ['malloc', 'free', 'calloc', 'realloc'];

function lib(): string {
  return fixture('direct_lib', { flags: ['-shared', '-fPIC'], variant: '.so' });
}

function run(variant: 'lazy' | 'relro', env: Record<string, string>): Record<string, string> {
  const exe =
    variant === 'lazy'
      ? fixture('direct_bind', { flags: ['-Wl,-z,lazy'], libs: ['-ldl'], variant: '-lazy' })
      : fixture('direct_bind', { flags: ['-no-pie', '-Wl,-z,now,-z,relro'], libs: ['-ldl'], variant: '-relro' });
  const r = runPreloaded(exe, [lib()], env);
  assert.equal(r.status, 0, `${variant}: exit ${r.status} ${r.signal ?? ''}\n${r.stdout}\n${r.stderr}`);
  return Object.fromEntries(r.stdout.trim().split('\n').map((l) => l.split('=') as [string, string]));
}

function expectAll(out: Record<string, string>, when: string, tag: string, want: string | string[]) {
  const allowed = Array.isArray(want) ? want : [want];
  for (const name of NAMES) {
    const got = out[`${when}.${tag}.${name}`];
    assert.ok(allowed.includes(got ?? 'missing'), `${when}.${tag}.${name}: ${got}, want ${allowed.join(' or ')}`);
  }
}

function expectSwitching(out: Record<string, string>, startedAtLoad: boolean) {
  expectAll(out, 'before', 'exe', startedAtLoad ? 'bound' : ['lazy', 'exported']);
  // a library loaded while profiling keeps the exported targets until the next switch
  expectAll(out, 'before', 'lib', 'exported');
  expectAll(out, 'profiling', 'exe', 'bound');
  expectAll(out, 'profiling', 'lib', startedAtLoad ? 'exported' : 'bound');
  expectAll(out, 'stopped', 'exe', 'exported');
  expectAll(out, 'stopped', 'lib', 'exported');
  assert.equal(out.cycles, '300');
  expectAll(out, 'cycled', 'exe', 'exported');
  expectAll(out, 'child', 'exe', 'exported');
  expectAll(out, 'parent', 'exe', 'bound');
  assert.equal(out.child_status, '0');
}

test(`profiling binds the PLT slots straight to the watching entry points and stopping unbinds them (${mimallocLabel})`, { skip: onMusl && MUSL_NO_BIND }, () => {
  expectSwitching(run('lazy', {}), false);
  expectSwitching(run('relro', {}), false);
});

test(`started at load, a lazily bound executable's unresolved slots are bound too (${mimallocLabel})`, { skip: onMusl && MUSL_NO_BIND }, () => {
  const out = run('lazy', { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096' });
  expectSwitching(out, true);
});

test(`control: MIMALLOC_PROF_DIRECT=0 leaves every slot on the exported entry points, and the checks see it (${mimallocLabel})`, () => {
  for (const variant of ['lazy', 'relro'] as const) {
    const out = run(variant, { MIMALLOC_PROF_DIRECT: '0' });
    expectAll(out, 'profiling', 'exe', ['exported', 'lazy']);
    expectAll(out, 'profiling', 'lib', 'exported');
    assert.throws(() => expectSwitching(out, false), /profiling\.exe\.malloc: (exported|lazy)/);
  }
});
