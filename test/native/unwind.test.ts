/** The stack walk (native/src/stack.c with the unwind rules of unwind.c) against libgcc's
 * unwinder, stack by stack, in the same process: the test-hooks build compares every sampled
 * stack with glibc's backtrace() over the same frames and prints the tally at exit. The
 * fixture reaches malloc through plain, recursive, rbp-addressed and stack-realigning frames,
 * libc calling back into the program and allocating itself, libstdc++ containers and
 * exceptions, on the main thread, a pthread and a C11 thread; it is built without frame
 * pointers (-O2: every frame must come from the call-frame information) and with them. The
 * positive control takes every step by the frame-pointer chain and never falls back to
 * libgcc (MP_TEST_UNWIND_FP_ONLY=1), which is what a frame-pointer walk alone gets, and the
 * same comparison rejects it. The fixture also has signal frames (raised, and a profiling
 * timer interrupting code that keeps a stack address in rbp) and stack-realigning frames. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { release } from 'node:os';

import { join } from 'node:path';

import { fixture, root as repoRoot } from '../helpers.js';
import { execWrapper, mimallocLabel, onMusl } from '../mimalloc.js';
import { buildTestHooks, KV, runUnder } from '../reliability/util.js';

const NO_BUILTIN = ['-fno-builtin-malloc', '-fno-builtin-free', '-fno-builtin-calloc', '-fno-builtin-realloc'];
const ENV = { MIMALLOC_PROF: '1', MIMALLOC_PROF_SAMPLE_INTERVAL: '4096', MIMALLOC_PROF_SEED: '3', MP_TEST_UNWIND_CHECK: '1' };

const cross = execWrapper.length > 0;

/** Every test here checks the table-driven walk, which the musl build leaves out
 * (docs/install.md, musl), with a C++ fixture (MUSL_NO_CXX). */
const skipOnMusl = {
  skip: onMusl && "musl: the table-driven unwinder checked here is off on musl (it needs glibc 2.35's _dl_find_object), and the fixture is C++",
};

function tally(bin: string, env: Record<string, string> = {}) {
  const r = runUnder(buildTestHooks(), bin, ['60'], { ...ENV, ...env }, 120_000);
  assert.equal(r.status, 0, r.stderr);
  const line = r.stderr.split('\n').find((l) => l.startsWith('unwind check:')) ?? '';
  const kv = new KV(line.replace('unwind check:', '').trim().split(/\s+/).join('\n'));
  return {
    stacks: kv.num('stacks'), agreed: kv.num('agreed'), fallbacks: kv.num('fallbacks'),
    boundsQuery: kv.num('bounds_query'), boundsText: kv.num('bounds_text'), boundsAttr: kv.num('bounds_attr'),
    rulesParsed: kv.num('rules_parsed'), givenBack: kv.num('given_back'),
    memoWhole: kv.num('memo_whole'), memoPart: kv.num('memo_part'),
  };
}

/** Linux >= 6.11 has PROCMAP_QUERY, with which a thread's stack bounds cost one ioctl. */
function kernelHasMapQuery(): boolean {
  const [major = 0, minor = 0] = release().split('.').map(Number);
  return major > 6 || (major === 6 && minor >= 11);
}

for (const [variant, flags] of [
  ['-O2 without frame pointers', ['-O2', '-fomit-frame-pointer']],
  ['-O0 with frame pointers', ['-O0', '-fno-omit-frame-pointer']],
] as const) {
  test(`every sampled stack is the one libgcc's unwinder finds (${variant}, ${mimallocLabel})`, skipOnMusl, (t) => {
    const bin = fixture('unwind', { flags: [...NO_BUILTIN, ...flags], variant: flags[0] });
    const { stacks, agreed, fallbacks } = tally(bin);
    t.diagnostic(`${agreed} of ${stacks} stacks identical; ${fallbacks} walks needed libgcc's unwinder for a step no rule could take`);
    // 60 rounds on three threads make a few thousand samples at 4 KiB
    assert.ok(stacks >= 2000, `only ${stacks} stacks were compared`);
    assert.equal(agreed, stacks);
    // the rules take every step but the few where the interrupted code had rbp as scratch
    // while its own rule is rbp-based (-O0, the timer's samples)
    assert.ok(fallbacks <= stacks / 100, `${fallbacks} fallbacks`);
  });
}

// AArch64 (the arm64 pass, whose emulated processor has pointer authentication): code built with
// -mbranch-protection=pac-ret signs every return address it saves (the high bits); the walk strips
// them (mp_strip_ra: xpaclri), as libgcc does. Control: the test-hooks build that leaves them signed
// (MP_TEST_NO_PAC_STRIP=1) gives no stack libgcc gives.
if (cross) {
  test(`return addresses signed by pointer authentication (-mbranch-protection=pac-ret): every stack libgcc's (${mimallocLabel})`, (t) => {
    const bin = fixture('unwind', { flags: [...NO_BUILTIN, '-O2', '-fomit-frame-pointer', '-mbranch-protection=pac-ret'], variant: '-pac' });
    const on = tally(bin);
    t.diagnostic(`${on.agreed} of ${on.stacks} stacks identical, ${on.fallbacks} fallbacks`);
    assert.ok(on.stacks >= 2000);
    assert.equal(on.agreed, on.stacks);
    const off = tally(bin, { MP_TEST_NO_PAC_STRIP: '1' });
    t.diagnostic(`control (MP_TEST_NO_PAC_STRIP=1): ${off.agreed} of ${off.stacks} identical`);
    assert.ok(off.agreed < off.stacks / 2, `${off.agreed} of ${off.stacks} agreed with signed return addresses`);
  });
}

// AArch64: a signal handler returns to a trampoline without call-frame information (Linux's vDSO
// since 2020, qemu's own); the walk knows the kernel's signal frame by its layout (stack.c
// bare_signal_frame) and goes on from the interrupted registers in its ucontext, as libgcc does from
// the trampoline's instructions. Control: MP_TEST_NO_BARE_SIGNAL=1 (test-hooks) steps by the frame
// record there, which skips the interrupted function.
if (cross) {
  test(`signal frames behind a trampoline without CFI: every stack libgcc's (${mimallocLabel})`, (t) => {
    const bin = fixture('unwind', { flags: [...NO_BUILTIN, '-O2', '-fomit-frame-pointer'], variant: '-O2' });
    const off = tally(bin, { MP_TEST_NO_BARE_SIGNAL: '1' });
    t.diagnostic(`control (MP_TEST_NO_BARE_SIGNAL=1): ${off.agreed} of ${off.stacks} identical, ${off.fallbacks} fallbacks`);
    assert.ok(off.agreed < off.stacks || off.fallbacks > 0, 'the control took every signal frame as the walk does');
  });
}

// The walk's memo (stack.c walk_memo_t): a walk that reaches the registers a step of the thread's last walk started
// from takes the rest from it, once every stack word those steps read is found unchanged. The fixture's stacks share
// their upper frames and differ below, and its recursion returns to the same depth through other callers, so a memo
// trusted without that check gives other stacks' frames.
test(`the walk's memo serves most walks and every stack is still libgcc's (${mimallocLabel})`, skipOnMusl, (t) => {
  const bin = fixture('unwind', { flags: [...NO_BUILTIN, '-O2', '-fomit-frame-pointer'], variant: '-O2' });
  const r = tally(bin);
  t.diagnostic(`${r.agreed} of ${r.stacks} identical; ${r.memoWhole} walks taken whole from the memo, ${r.memoPart} from a later step`);
  assert.equal(r.agreed, r.stacks);
  assert.ok(r.memoWhole + r.memoPart >= r.stacks / 4, `the memo served ${r.memoWhole + r.memoPart} of ${r.stacks} walks`);
});

test('positive control: the memo trusted without checking the stack words (MP_TEST_MEMO_TRUST=1) gives stacks libgcc disagrees with', skipOnMusl, (t) => {
  const bin = fixture('unwind', { flags: [...NO_BUILTIN, '-O2', '-fomit-frame-pointer'], variant: '-O2' });
  const r = tally(bin, { MP_TEST_MEMO_TRUST: '1' });
  t.diagnostic(`control: ${r.agreed} of ${r.stacks} identical`);
  assert.ok(r.stacks >= 2000);
  assert.ok(r.agreed < r.stacks, 'every stack agreed with the memo trusted blindly');
});

test('positive control: frame-pointer steps alone, without the fallback (MP_TEST_UNWIND_FP_ONLY=1), disagree with libgcc', skipOnMusl, (t) => {
  const bin = fixture('unwind', { flags: [...NO_BUILTIN, '-O2', '-fomit-frame-pointer'], variant: '-O2' });
  const { stacks, agreed } = tally(bin, { MP_TEST_UNWIND_FP_ONLY: '1' });
  t.diagnostic(`${agreed} of ${stacks} stacks identical`);
  assert.ok(stacks >= 2000);
  assert.ok(agreed < stacks / 2, `${agreed} of ${stacks} agreed without the unwind rules`);
});

// Where the walk's inputs come from, on the fixture's three threads, all giving libgcc's stacks:
// - a thread's stack bounds (which bound every read of the walk), learned outside any
//   allocation: the main thread's at load, by one ioctl where the kernel has PROCMAP_QUERY, else
//   the text of /proc/self/maps (MP_TEST_MAPS_TEXT=1 forces the text); the pthread's and the C11
//   thread's in their start wrappers, from pthread_getattr_np;
// - the unwind rules, read through the objects' mappings, whose pages go back a burst of walks
//   at a time (given_back); MP_TEST_UNWIND_KEEP_PAGES=1 keeps them, and the stacks are the same.
// qemu-user answers /proc/self/maps from a file of its own (the ioctl never reaches the kernel); and
// Debian's arm64 binutils keep .eh_frame in the executable text segment, whose pages are never handed
// back (unwind.c givable_range): on the arm64 pass nothing is, and the stacks are still libgcc's.
const query = kernelHasMapQuery() && !cross;
const sources: { title: string; env: Record<string, string>; boundsByQuery: boolean; handsBack: boolean }[] = [
  { title: 'main thread\'s bounds by PROCMAP_QUERY where the kernel has it, pages handed back', env: {}, boundsByQuery: query, handsBack: true },
  { title: 'main thread\'s bounds from the text of /proc/self/maps (MP_TEST_MAPS_TEXT=1)', env: { MP_TEST_MAPS_TEXT: '1' }, boundsByQuery: false, handsBack: true },
  { title: 'the tables\' pages kept (MP_TEST_UNWIND_KEEP_PAGES=1)', env: { MP_TEST_UNWIND_KEEP_PAGES: '1' }, boundsByQuery: query, handsBack: false },
];
for (const c of sources) {
  test(`${c.title}: every stack still libgcc's (${mimallocLabel})`, skipOnMusl, (t) => {
    const bin = fixture('unwind', { flags: [...NO_BUILTIN, '-O2', '-fomit-frame-pointer'], variant: '-O2' });
    const r = tally(bin, c.env);
    t.diagnostic(`${r.agreed} of ${r.stacks} identical; main thread's bounds by ioctl ${r.boundsQuery}, by text ${r.boundsText}; other threads' by their attributes ${r.boundsAttr}; rules parsed ${r.rulesParsed}, ${r.givenBack} bytes of table pages handed back`);
    assert.ok(r.stacks >= 2000);
    assert.equal(r.agreed, r.stacks);
    assert.equal(c.boundsByQuery ? r.boundsQuery : r.boundsText, 1, 'the main thread learned its bounds at load');
    assert.equal(c.boundsByQuery ? r.boundsText : r.boundsQuery, 0);
    assert.ok(r.boundsAttr >= 2, 'the pthread and the C11 thread learned theirs as they started');
    assert.ok(r.rulesParsed > 20, `${r.rulesParsed} rules parsed`);
    if (c.handsBack && !cross) assert.ok(r.givenBack >= 64 * 1024, `${r.givenBack} bytes handed back`);
    else assert.equal(r.givenBack, 0);
  });
}
