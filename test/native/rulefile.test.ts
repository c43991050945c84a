/** The unwind rules kept between runs (native/src/rulefile.c, MIMALLOC_PROF_UNWIND_CACHE): a
 * process writes its unwind cache at exit, a file per object named by its build id; the next
 * process fills its cache from them where profiling starts, so the return addresses met before
 * are hits. Checked with the unwind fixture and the test-hooks build, which compares every
 * sampled stack with libgcc's (test/native/unwind.test.ts) and counts the rules it parsed:
 *  - a second run parses far fewer rules, every stack is still libgcc's, and the rules take
 *    every step themselves (no fallback to libgcc's unwinder, which a step that fails the walk's
 *    checks takes); one that parsed none writes nothing;
 *  - control: files whose rules are shifted by one word (their checksums made to hold) give
 *    stacks libgcc disagrees with or fallbacks, so the gate sees a wrong rule a file brings;
 *  - a file that fails its checksum, or was written by another build of the library, is
 *    ignored whole: the run parses as many rules as a first one, every stack libgcc's;
 *  - a folder that cannot be written (a file in its place) changes nothing for the program. */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { fixture } from '../helpers.js';
import { mimallocLabel, onMusl } from '../mimalloc.js';
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
  // a run that parsed nothing has nothing new to keep, and writes nothing (one that met a new
  // return address, a timer's signal frame somewhere new, writes its files again)
  if (warm.parsed === 0) assert.deepEqual(files.map((f) => statSync(join(dir, f)).mtimeMs), written, 'a run that learned nothing wrote its files');
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

test('a file that fails its checksum, or another build\'s, is ignored whole', skipOnMusl, (t) => {
  for (const [what, change] of [
    ['one rule changed, the checksum left', (entries: Buffer, count: number) => {
      if (count === 0) return 0;
      entries.writeInt32LE(entries.readInt32LE(8) + 8, 8);
      return 1;
    }],
    ['another build of the library', () => 0],
  ] as const) {
    const dir = join(fastTempDir('mpp-rules-'), 'unwind');
    const cold = run(dir);
    if (what === 'another build of the library') {
      for (const name of readdirSync(dir).filter((f) => f.endsWith('.rules'))) {
        const file = readFileSync(join(dir, name));
        file.writeUInt8(file.readUInt8(32) ^ 0xff, 32); // the library's build id (header offset 32)
        writeFileSync(join(dir, name), file);
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
