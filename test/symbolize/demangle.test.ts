/** Demangling: fixed examples, c++filt (binutils) as the oracle on real symbol tables, and
 * inputs that must come back unchanged without throwing. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { demangle, demangleBuiltin, demanglerEngine } from '../../src/symbolize/demangle.js';
import { buildDir, root, run } from '../helpers.js';

const EXAMPLES: [string, string][] = [
  ['_ZN4node6worker6Worker11StartThreadEPv', 'node::worker::Worker::StartThread(void*)'],
  ['_Z12make_widgetsRSt6vectorIP6WidgetSaIS1_EEi', 'make_widgets(std::vector<Widget*, std::allocator<Widget*> >&, int)'],
  // the real node symbol (SnapshotData has 12 letters) …
  ['_ZN2v88internal7Isolate4InitEPNS0_12SnapshotDataES3_S3_b', 'v8::internal::Isolate::Init(v8::internal::SnapshotData*, v8::internal::SnapshotData*, v8::internal::SnapshotData*, bool)'],
  ['_ZNKSt6vectorIiSaIiEE4sizeEv', 'std::vector<int, std::allocator<int> >::size() const'],
  ['_Znwm', 'operator new(unsigned long)'],
  ['_ZdlPvm', 'operator delete(void*, unsigned long)'],
  ['_ZN3foo3barEv.isra.0', 'foo::bar() [clone .isra.0]'],
  ['_ZThn8_N3foo3barEv', 'non-virtual thunk to foo::bar()'],
  ['_ZTv0_n24_N4node9AsyncWrapD1Ev', 'virtual thunk to node::AsyncWrap::~AsyncWrap()'],
  ['_ZN4core3ptr13drop_in_place17h0123456789abcdefE', 'core::ptr::drop_in_place'],
  ['_RNvCs1234_7mycrate3foo', 'mycrate::foo'],
];

/** Same text up to spacing and `> >`. */
const norm = (s: string) => s.replace(/\s+/g, '');

test('the WASM engine (gecko-profiler-demangle) loads synchronously', () => {
  const t = performance.now();
  const engine = demanglerEngine();
  console.log(`# demangler engine: ${engine}, first use ${(performance.now() - t).toFixed(1)} ms`);
  assert.equal(engine, 'wasm');
});

test('examples', () => {
  for (const [mangled, want] of EXAMPLES) assert.equal(norm(demangle(mangled)), norm(want), mangled);
  // … and the brief's spelling with a wrong length (16SnapshotData): c++filt rejects it too;
  // the name still reads, with the parameters elided
  const bad = '_ZN2v88internal7Isolate4InitEPNS0_16SnapshotDataEPS2_S3_b';
  assert.equal(run('c++filt', [bad]).stdout.trim(), bad, 'c++filt cannot read it either');
  assert.equal(demangle(bad), 'v8::internal::Isolate::Init(...)');
  // a symbol version suffix (as nm prints) is kept
  assert.equal(demangle('_ZNSo5flushEv@@GLIBCXX_3.4'), 'std::ostream::flush()@@GLIBCXX_3.4');
});

test('plain names come back unchanged (the WASM engine strips a leading _ when nothing matches)', () => {
  for (const n of ['main', 'malloc', '_start', '_init', '__libc_start_main', '_IO_file_write', '__cxa_throw', '_GLOBAL__sub_I_main.cc', '_Z', '_ZZ', '_ZN', '_Rfoo', '_R', 'Builtin:Foo', 'JS:~f /x.js:1:2', '', 'é_Z3fooé', '?x@@YAXXZ']) {
    assert.equal(demangle(n), n, JSON.stringify(n));
    assert.equal(demangleBuiltin(n), n, JSON.stringify(n));
  }
});

test('never throws and stays bounded on hostile input', () => {
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  const alphabet = 'NEISt_0123456789abcdefvPRKTISDCZLlijmxyzJXpO';
  for (let i = 0; i < 20000; i++) {
    let s = rand() < 0.5 ? '_Z' : '_ZN';
    const len = 1 + Math.floor(rand() * 40);
    for (let j = 0; j < len; j++) s += alphabet[Math.floor(rand() * alphabet.length)];
    assert.equal(typeof demangle(s), 'string');
    assert.equal(typeof demangleBuiltin(s), 'string');
  }
  // substitutions that double at each level: c++filt-style renderings would reach gigabytes
  const sid = (i: number) => (i === 0 ? 'S_' : `S${(i - 1).toString(36).toUpperCase()}_`);
  let bomb = '_Z1f1aIiE1bIS0_S0_E';
  for (let k = 3; k < 42; k++) bomb += `${sid(1)}I${sid(k - 1)}${sid(k - 1)}E`;
  const deep = ['_Z1fP' + 'P'.repeat(100_000) + 'i', '_Z1f' + 'PFv'.repeat(20_000), '_Z' + 'N1a'.repeat(20_000) + 'E', bomb, '_Z'.repeat(40_000)];
  for (const s of deep) {
    const d = demangle(s);
    const b = demangleBuiltin(s);
    assert.ok(d.length <= 1 << 20 && b.length <= 1 << 20, `bounded output for ${s.slice(0, 30)}…`);
  }
  assert.equal(demangle(bomb), bomb);
  // @ts-expect-error: not a string
  assert.equal(demangle(undefined), undefined);
});

/** Compiles the C++ fixture into build/test/symbolize/ unless up to date. */
function widgets(): string {
  const src = join(root, 'test', 'symbolize', 'fixtures', 'widgets.cc');
  const out = join(buildDir, 'symbolize');
  const bin = join(out, 'widgets-demangle');
  mkdirSync(out, { recursive: true });
  if (!existsSync(bin) || statSync(bin).mtimeMs < statSync(src).mtimeMs) {
    const r = spawnSync('g++', ['-std=c++17', '-g', '-O1', src, '-o', bin], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  }
  return bin;
}

/** Mangled FUNC names of a binary's symbol table and c++filt's reading of each. */
function oracle(bin: string, limit = Infinity): [string, string][] {
  const nm = run('nm', ['--defined-only', bin]);
  const names = [...new Set(nm.stdout.split('\n').map((l) => l.split(' ')[2] ?? ''))].filter((n) => n.startsWith('_Z'));
  const step = Math.max(1, Math.floor(names.length / limit));
  const picked = names.filter((_, i) => i % step === 0);
  const filt = spawnSync('c++filt', [], { input: picked.join('\n') + '\n', encoding: 'utf8', maxBuffer: 256 << 20 });
  const lines = filt.stdout.split('\n');
  return picked.map((n, i) => [n, lines[i]!]);
}

/** `ours` agrees with c++filt's `theirs`: equal up to spacing and integer-literal style,
 * or a suffix of it (c++filt prints function templates' return types). */
function agrees(ours: string, theirs: string): boolean {
  const a = norm(ours).replace(/\(unsignedlong\)(\d+)/g, '$1ul').replace(/\(unsignedint\)(\d+)/g, '$1u');
  const b = norm(theirs);
  return a === b || b.endsWith(a);
}

function compare(pairs: [string, string][], f: (s: string) => string): { agree: number; bad: string[] } {
  const bad: string[] = [];
  let agree = 0;
  for (const [m, want] of pairs) {
    const got = f(m);
    if (agrees(got, want)) agree++;
    else bad.push(`${m}\n   got  ${got}\n   want ${want}`);
  }
  return { agree, bad };
}

test('C++ fixture: every function symbol reads as c++filt reads it', () => {
  const pairs = oracle(widgets());
  const own = pairs.filter(([, d]) => /shapes::|make_widgets|total\(/.test(d));
  assert.ok(own.length >= 8, `fixture symbols: ${own.length}`);
  for (const [name, f] of [
    ['demangle', demangle],
    ['builtin', demangleBuiltin],
  ] as const) {
    const r = compare(own, f);
    assert.deepEqual(r.bad, [], `${name}: the fixture's own functions`);
    const all = compare(pairs, f);
    // the rest are libstdc++ instantiations: std:: substitutions, packs, lambdas
    assert.ok(all.agree >= pairs.length * 0.97, `${name}: ${all.agree}/${pairs.length}\n${all.bad.slice(0, 5).join('\n')}`);
  }
});

test('/usr/bin/node: 3000 symbols read as c++filt reads them', { skip: !existsSync('/usr/bin/node') && 'no /usr/bin/node' }, () => {
  const pairs = oracle('/usr/bin/node', 3000);
  assert.ok(pairs.length >= 2000);
  const wasm = compare(pairs, (s) => demangle(s));
  const builtin = compare(pairs, demangleBuiltin);
  console.log(`# agreement with c++filt: demangle ${wasm.agree}/${pairs.length}, builtin ${builtin.agree}/${pairs.length}`);
  assert.ok(wasm.agree >= pairs.length * 0.9, wasm.bad.slice(0, 5).join('\n'));
  assert.ok(builtin.agree >= pairs.length * 0.97, builtin.bad.slice(0, 5).join('\n'));
});

test('built-in engine alone: examples, partial names, Rust legacy', () => {
  for (const [mangled, want] of EXAMPLES.slice(0, 4)) assert.equal(norm(demangleBuiltin(mangled)), norm(want), mangled);
  assert.equal(demangleBuiltin('_ZN2v88internal7Isolate4InitEPNS0_16SnapshotDataEPS2_S3_b'), 'v8::internal::Isolate::Init(...)');
  assert.equal(demangleBuiltin('_Z1fIiEvT_'), 'f<int>(int)');
  assert.equal(demangleBuiltin('_ZN3foo3barEv.cold'), 'foo::bar() [clone .cold]');
  assert.equal(demangleBuiltin('_ZN6shapes6WidgetD2Ev'), 'shapes::Widget::~Widget()');
  assert.equal(demangleBuiltin('_ZN6shapes6WidgetC1Ei'), 'shapes::Widget::Widget(int)');
  assert.equal(demangleBuiltin('_ZN6shapes6WidgetpLERKS0_'), 'shapes::Widget::operator+=(shapes::Widget const&)');
  assert.equal(demangleBuiltin('_Z5totalRKSt6vectorISt10unique_ptrIN6shapes6WidgetESt14default_deleteIS2_EESaIS5_EEPFcPKcE'),
    'total(std::vector<std::unique_ptr<shapes::Widget, std::default_delete<shapes::Widget>>, std::allocator<std::unique_ptr<shapes::Widget, std::default_delete<shapes::Widget>>>> const&, char (*)(char const*))');
  assert.equal(demangleBuiltin('_ZN4core3ptr85drop_in_place$LT$std..rt..lang_start$LT$$LP$$RP$$GT$..$u7b$$u7b$closure$u7d$$u7d$$GT$17h0123456789abcdefE'),
    'core::ptr::drop_in_place<std::rt::lang_start<()>::{{closure}}>');
});
