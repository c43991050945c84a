/**
 * The arm64 build itself (scripts/test-arm64.mjs only): the entry points reach the slow paths
 * only by tail jumps (`b`, never `bl`), as on x86-64 (test/native/regressions.test.ts): a slow
 * path's frame record then holds the program's x29 and return address (internal.h CALLER_OF).
 * Control: an object whose entry calls its slow path is flagged by the same check.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { libraryPath } from '../../src/preload/library.js';
import { buildDir } from '../helpers.js';
import { targetCC } from '../mimalloc.js';

const objdump = process.env.MIMALLOC_PPROF_TEST_OBJDUMP ?? '';
if (objdump === '') throw new Error('run by scripts/test-arm64.mjs (MIMALLOC_PPROF_TEST_OBJDUMP is unset)');

/** Calls (bl) to a slow path from anywhere but the slow paths themselves. */
function slowPathCalls(object: string): string[] {
  const dis = spawnSync(objdump, ['-d', '--no-show-raw-insn', object], { encoding: 'utf8', maxBuffer: 64 << 20 });
  assert.equal(dis.status, 0, dis.stderr);
  assert.match(dis.stdout, /file format elf64-littleaarch64/);
  const bad: string[] = [];
  let fn = '';
  for (const line of dis.stdout.split('\n')) {
    const head = /^[0-9a-f]+ <([^>]+)>:$/.exec(line);
    if (head) fn = head[1]!;
    else if (/\sbl\s.*<mp_[a-z_]*_slow(?:@plt)?>/.test(line) && !/^mp_[a-z_]*_slow$/.test(fn)) bad.push(`${fn}: ${line.trim()}`);
  }
  return bad;
}

test('arm64: entry points reach the slow paths only by tail jumps (the built library, disassembled)', (t) => {
  const lib = libraryPath();
  const bad = slowPathCalls(lib);
  const dis = spawnSync(objdump, ['-d', '--no-show-raw-insn', lib], { encoding: 'utf8', maxBuffer: 64 << 20 }).stdout;
  const jumps = dis.split('\n').filter((l) => /\sb\s.*<mp_[a-z_]*_slow(?:@plt)?>/.test(l)).length;
  t.diagnostic(`${jumps} tail jumps to slow paths; ${bad.length === 0 ? 'no call to one outside the slow paths' : bad.join('\n')}`);
  assert.ok(jumps > 10, `${jumps} tail jumps found: the check reads this library's disassembly`);
  assert.deepEqual(bad, []);
});

test('arm64 positive control: the disassembly check flags an entry point that calls its slow path', () => {
  const dir = join(buildDir, 'entry-control');
  mkdirSync(dir, { recursive: true });
  const src = join(dir, 'planted.c');
  const obj = join(dir, 'planted.so');
  writeFileSync(
    src,
    `#include <errno.h>
#include <stddef.h>
__attribute__((noinline, noipa)) void* mp_alloc_slow(size_t n, size_t a, unsigned f, void* ra) { (void)a; (void)f; (void)ra; return (void*)n; }
int entry(void** out, size_t n) { int saved = errno; void* p = mp_alloc_slow(n, 64, 0, 0); errno = saved; *out = p; return p ? 0 : 12; }
`,
  );
  const cc = spawnSync(targetCC, ['-O2', '-fomit-frame-pointer', '-shared', '-fPIC', src, '-o', obj], { encoding: 'utf8' });
  assert.equal(cc.status, 0, cc.stderr);
  assert.equal(slowPathCalls(obj).length, 1);
});
