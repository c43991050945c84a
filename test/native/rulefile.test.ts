/** The unwind rules kept between runs (native/src/rulefile.c, MIMALLOC_PROF_UNWIND_CACHE): a
 * process writes its unwind cache at exit, a file per object named by its build id; the next
 * process fills its cache from them where profiling starts, so the return addresses met before
 * are hits. Checked with the unwind fixture and the test-hooks build, which compares every
 * sampled stack with libgcc's (test/native/unwind.test.ts) and counts the rules it parsed:
 *  - a second run parses far fewer rules, every stack is still libgcc's, and the rules take
 *    every step themselves (no fallback to libgcc's unwinder, which a step that fails the walk's
 *    checks takes); one that parsed none writes nothing (control: one that parsed some does);
 *  - control: files whose rules are shifted by one word (their checksums made to hold) give
 *    stacks libgcc disagrees with or fallbacks, so the gate sees a wrong rule a file brings;
 *  - a file that fails its checksum, was written by another build of the library or for another
 *    object, or is cut short, is ignored whole: the run parses as many rules as a first one,
 *    every stack libgcc's; a FIFO in a file's place is not waited for;
 *  - a folder that cannot be written (a file in its place), or a file size limit of 0, changes
 *    nothing for the program (its status, its output), and leaves no file behind;
 *  - a process that unloaded a library (dlclose) keeps nothing: its cache may hold the unloaded
 *    code's rules under addresses another object holds now. The same program without the
 *    dlclose keeps its files (the control that the unload is what stops it), those of the
 *    objects loaded at its start only. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { fixture } from '../helpers.js';
import { mimallocLabel, onCross, onMusl, targetCC } from '../mimalloc.js';
import { buildTestHooks, fastTempDir, KV, runUnder } from '../reliability/util.js';

const NO_BUILTIN = ['-fno-builtin-malloc', '-fno-builtin-free', '-fno-builtin-calloc', '-fno-builtin-realloc'];
const ENV = { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096', MIMALLOC_PROF_SEED: '3', MP_TEST_UNWIND_CHECK: '1' };
const skipOnMusl = { skip: onMusl && 'musl: the table-driven unwinder (and so its cache) is off on musl' };

const HEADER = 96; // rulefile.c file_header_t
const RULE_CFI = 1;

function run(dir: string, env: Record<string, string> = {}) {
  const bin = fixture('unwind', { flags: [...NO_BUILTIN, '-O2', '-fomit-frame-pointer'], variant: '-O2' });
  const r = runUnder(buildTestHooks(), bin, ['60'], { ...ENV, MIMALLOC_PROF_UNWIND_CACHE: dir, ...env }, 120_000);
  assert.equal(r.status, 0, r.stderr);
  const line = r.stderr.split('\n').find((l) => l.startsWith('unwind check:')) ?? '';
  const kv = new KV(line.replace('unwind check:', '').trim().split(/\s+/).join('\n'));
  return { stacks: kv.num('stacks'), agreed: kv.num('agreed'), fallbacks: kv.num('fallbacks'), parsed: kv.num('rules_parsed'), stderr: r.stderr };
}

/** rulefile.c's checksum: FNV-1a 64 over the entries' bytes, seeded with their count. */
function checksum(entries: Buffer, count: number): bigint {
  let h = 0xcbf29ce484222325n ^ BigInt(count);
  for (const b of entries) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return h;
}

/** Rewrites every file of dir through `change` (its entries' buffer), the checksum made to hold
 * unless `keepChecksum`. Returns the entries changed. */
function rewrite(dir: string, change: (entries: Buffer, count: number) => number, keepChecksum = false): number {
  let changed = 0;
  for (const name of readdirSync(dir).filter((f) => f.endsWith('.rules'))) {
    const file = readFileSync(join(dir, name));
    const count = file.readUInt32LE(12);
    assert.equal(file.length, HEADER + 16 * count, `${name}: ${file.length} bytes for ${count} entries`);
    const entries = file.subarray(HEADER);
    changed += change(entries, count);
    if (!keepChecksum) file.writeBigUInt64LE(checksum(entries, count), 16);
    writeFileSync(join(dir, name), file);
  }
  return changed;
}

test(`a second run takes its rules from the first's files: far fewer parsed, every stack libgcc's (${mimallocLabel})`, skipOnMusl, (t) => {
  const dir = join(fastTempDir('mpp-rules-'), 'unwind');
  const cold = run(dir);
  const files = readdirSync(dir).filter((f) => f.endsWith('.rules'));
  const written = files.map((f) => statSync(join(dir, f)).mtimeMs);
  const warm = run(dir);
  t.diagnostic(`first run: ${cold.parsed} rules parsed, ${cold.agreed} of ${cold.stacks} stacks libgcc's; files: ${files.length}; second: ${warm.parsed} parsed, ${warm.agreed} of ${warm.stacks}; fallbacks ${cold.fallbacks}, ${warm.fallbacks}`);
  assert.ok(cold.stacks >= 2000 && warm.stacks >= 2000);
  assert.equal(cold.agreed, cold.stacks);
  assert.equal(warm.agreed, warm.stacks);
  // a step a wrong rule took would be caught by the walk's checks and the stack taken by libgcc's
  // unwinder instead (a fallback): the rules from the files take every step themselves
  assert.ok(warm.fallbacks <= warm.stacks / 100, `${warm.fallbacks} fallbacks`);
  assert.ok(files.length >= 2, `files: ${files.join(', ')}`); // the fixture's own and its libraries'
  assert.ok(cold.parsed > 20, `${cold.parsed} rules parsed cold`);
  assert.ok(warm.parsed * 4 <= cold.parsed, `${warm.parsed} rules parsed warm against ${cold.parsed} cold`);
});

test('a run that parses no rule writes nothing; one that parses rules writes its files again (control)', skipOnMusl, () => {
  const dir = join(fastTempDir('mpp-rules-'), 'unwind');
  run(dir);
  const files = readdirSync(dir).filter((f) => f.endsWith('.rules')).sort();
  const written = () => files.map((f) => statSync(join(dir, f)).mtimeMs);
  const before = written();
  const idle = run(dir, { MIMALLOC_PROF_SAMPLE_INTERVAL: '1024g' }); // profiling, but no sample: no rule parsed
  assert.equal(idle.parsed, 0);
  assert.deepEqual(written(), before, 'a run that parsed nothing wrote its files');
  rmSync(join(dir, files[0]!)); // the control: that object's rules are parsed again, and all files written
  const again = run(dir);
  assert.ok(again.parsed > 0);
  assert.ok(readdirSync(dir).includes(files[0]!), 'the file was not written again');
  assert.notDeepEqual(written(), before);
});

test('positive control: files whose rules are off by a word are caught (stacks libgcc disagrees with, or fallbacks)', skipOnMusl, (t) => {
  const dir = join(fastTempDir('mpp-rules-'), 'unwind');
  run(dir);
  const shifted = rewrite(dir, (entries, count) => {
    let n = 0;
    for (let i = 0; i < count; i++) {
      const rule = 16 * i + 8;
      if (entries[rule + 6] !== RULE_CFI) continue;
      entries.writeInt32LE(entries.readInt32LE(rule) + 8, rule); // cfa_off one word further
      n++;
    }
    return n;
  });
  const wrong = run(dir);
  t.diagnostic(`${shifted} rules shifted: ${wrong.agreed} of ${wrong.stacks} stacks libgcc's, ${wrong.fallbacks} fallbacks, ${wrong.parsed} parsed`);
  assert.ok(shifted > 10, `${shifted} rules shifted`);
  assert.ok(wrong.agreed < wrong.stacks || wrong.fallbacks > wrong.stacks / 100, 'the shifted rules took every step');
});

test('a file that fails its checksum, another build\'s, another object\'s or one cut short is ignored whole', skipOnMusl, (t) => {
  for (const [what, change] of [
    ['one CFI rule changed, the checksum left', (entries: Buffer, count: number) => {
      for (let i = 0; i < count; i++) {
        const rule = 16 * i + 8;
        if (entries[rule + 6] !== RULE_CFI) continue;
        entries.writeInt32LE(entries.readInt32LE(rule) + 8, rule); // still a valid rule: only the checksum can tell
        return 1;
      }
      return 0;
    }],
    ['another build of the library', () => 0],
    ['each file under another object\'s name', () => 0],
    ['each file cut short by one entry', () => 0],
  ] as const) {
    const dir = join(fastTempDir('mpp-rules-'), 'unwind');
    const cold = run(dir);
    const names = readdirSync(dir).filter((f) => f.endsWith('.rules'));
    if (what === 'another build of the library') {
      for (const name of names) {
        const file = readFileSync(join(dir, name));
        file.writeUInt8(file.readUInt8(32) ^ 0xff, 32); // inside the library's build id (header bytes 24-55)
        writeFileSync(join(dir, name), file);
      }
    } else if (what === 'each file under another object\'s name') {
      assert.ok(names.length >= 2);
      const contents = names.map((n) => readFileSync(join(dir, n)));
      names.forEach((n, i) => writeFileSync(join(dir, n), contents[(i + 1) % names.length]!)); // rotated
    } else if (what === 'each file cut short by one entry') {
      for (const name of names) {
        const file = readFileSync(join(dir, name));
        writeFileSync(join(dir, name), file.subarray(0, file.length - 16));
      }
    } else {
      assert.ok(rewrite(dir, change, true) > 0);
    }
    const again = run(dir);
    t.diagnostic(`${what}: ${again.parsed} rules parsed (cold ${cold.parsed}), ${again.agreed} of ${again.stacks} stacks libgcc's`);
    assert.equal(again.agreed, again.stacks);
    assert.ok(again.fallbacks <= again.stacks / 100, `${again.fallbacks} fallbacks`);
    assert.ok(again.parsed * 4 > cold.parsed * 3, `${again.parsed} parsed against ${cold.parsed} cold: a damaged file was used`);
  }
});

test('a folder that cannot be written changes nothing for the program', skipOnMusl, () => {
  const base = fastTempDir('mpp-rules-');
  const blocked = join(base, 'unwind');
  writeFileSync(blocked, 'not a folder');
  const r = run(blocked);
  assert.equal(r.agreed, r.stacks);
  assert.equal(readFileSync(blocked, 'utf8'), 'not a folder');
  assert.doesNotMatch(r.stderr, /mimalloc-pprof: (?!unwind check)/, r.stderr);
});

test('a FIFO in a file\'s place is not waited for', skipOnMusl, () => {
  const dir = join(fastTempDir('mpp-rules-'), 'unwind');
  run(dir);
  const names = readdirSync(dir).filter((f) => f.endsWith('.rules'));
  for (const name of names) {
    rmSync(join(dir, name));
    assert.equal(spawnSync('mkfifo', [join(dir, name)]).status, 0);
  }
  const r = run(dir); // a blocking open would never return: runUnder's timeout fails the run
  assert.equal(r.agreed, r.stacks);
});

test('a file size limit of 0: the program ends as it would, and no file is left', { skip: skipOnMusl.skip || (onCross && 'arm64 pass: the limit is set by a shell of the host, which cannot exec the target\'s program outside qemu') }, () => {
  const dir = join(fastTempDir('mpp-rules-'), 'unwind');
  const bin = fixture('unwind', { flags: [...NO_BUILTIN, '-O2', '-fomit-frame-pointer'], variant: '-O2' });
  const r = runUnder(buildTestHooks(), '/bin/sh', ['-c', 'ulimit -f 0 && exec "$0" 60', bin], { ...ENV, MIMALLOC_PROF_UNWIND_CACHE: dir }, 120_000);
  assert.equal(r.signal, null, `killed by ${r.signal}`);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /unwind check:/);
  assert.deepEqual(readdirSync(dir), [], 'a file was written, or a temporary one left, under the limit');
});

/** A program that samples inside a library it loaded (rules of that library's code in the
 * cache), then unloads it (`unload`) or not, and loads a second library, likely at the same
 * address, and samples there too. */
function unloadProgram(): { bin: string; libs: string[] } {
  const dir = fastTempDir('mpp-rules-unload-');
  const lib = (name: string, body: string) => {
    const src = join(dir, `${name}.c`);
    writeFileSync(src, `#include <stdlib.h>\n__attribute__((noinline)) static void* deep(int n) { void* p = n ? deep(n - 1) : malloc(4096); __asm__ volatile("" : : "r"(p) : "memory"); return p; }\nvoid ${name}(void) { for (int i = 0; i < 200; i++) free(deep(${body})); }\n`);
    const out = join(dir, `lib${name}.so`);
    const r = spawnSync(targetCC, ['-O2', '-fomit-frame-pointer', '-shared', '-fPIC', ...NO_BUILTIN, src, '-o', out], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return out;
  };
  const libs = [lib('first', 'i % 7'), lib('second', 'i % 5')];
  const main = join(dir, 'main.c');
  writeFileSync(main, `#include <dlfcn.h>\n#include <stdio.h>\n#include <string.h>\nint main(int argc, char** argv) {\n  void* a = dlopen(argv[1], RTLD_NOW); if (!a) return 2;\n  ((void (*)(void))dlsym(a, "first"))();\n  if (strcmp(argv[3], "unload") == 0) dlclose(a);\n  void* b = dlopen(argv[2], RTLD_NOW); if (!b) return 3;\n  ((void (*)(void))dlsym(b, "second"))();\n  puts("done");\n  return 0;\n}\n`);
  const bin = join(dir, 'main');
  const r = spawnSync(targetCC, ['-O1', main, '-o', bin, '-ldl'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return { bin, libs };
}

test('a process that unloaded a library keeps nothing; the same without the unload keeps its files (control)', skipOnMusl, () => {
  const { bin, libs } = unloadProgram();
  const env = { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096', MIMALLOC_PROF_SEED: '3' };
  const kept = join(fastTempDir('mpp-rules-'), 'unwind');
  const a = runUnder(buildTestHooks(), bin, [...libs, 'keep'], { ...env, MIMALLOC_PROF_UNWIND_CACHE: kept });
  assert.equal(a.status, 0, a.stderr);
  assert.ok(readdirSync(kept).filter((f) => f.endsWith('.rules')).length >= 2, `kept: ${readdirSync(kept).join(', ')}`);
  for (const lib of libs) { // loaded after the start: never kept (their addresses may have been JIT code's)
    const id = /Build ID: ([0-9a-f]+)/.exec(spawnSync('readelf', ['-n', lib], { encoding: 'utf8' }).stdout)?.[1];
    assert.ok(id, `no build id in ${lib}`);
    assert.ok(!existsSync(join(kept, `${id}.rules`)), `${lib}, loaded after the start, was kept`);
  }
  const unloaded = join(fastTempDir('mpp-rules-'), 'unwind');
  const b = runUnder(buildTestHooks(), bin, [...libs, 'unload'], { ...env, MIMALLOC_PROF_UNWIND_CACHE: unloaded });
  assert.equal(b.status, 0, b.stderr);
  assert.equal(b.stdout.trim(), 'done');
  assert.ok(!existsSync(unloaded) || readdirSync(unloaded).length === 0, `written after an unload: ${existsSync(unloaded) ? readdirSync(unloaded).join(', ') : ''}`);
});
