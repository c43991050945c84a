/** V8 perf maps: parsing rules on written examples, then real maps written by this node. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { parsePerfMap, parsePerfName, perfMapPath, readPerfMap, type PerfSymbol } from '../../src/symbolize/perfmap.js';
import { readElf } from '../../src/symbolize/elf.js';
import { nodeMajor, root, tempDir } from '../helpers.js';

const fixtures = join(root, 'test', 'symbolize', 'fixtures');
const FLAGS = ['--perf-basic-prof', '--interpreted-frames-native-stack'];

test('names: every form Nodes 20 to 26 write, and the legacy tags', () => {
  const cases: [string, Partial<PerfSymbol>][] = [
    ['JS:~coldFunction /tmp/a.js:6:22', { name: 'coldFunction', file: '/tmp/a.js', line: 6, column: 22, kind: 'interpreted', tag: 'JS' }],
    ['JS:^hot /tmp/a.js:10:21', { name: 'hot', kind: 'baseline', line: 10 }],
    ['JS:*hot file:///tmp/dir%20x/m.mjs:2:30', { name: 'hot', file: '/tmp/dir x/m.mjs', kind: 'optimized', line: 2, column: 30 }],
    ['JS:+maglevved /tmp/a.js:3:4', { name: 'maglevved', kind: 'optimized' }],
    ['JS:~ /tmp/pm/script.js:8:18', { name: '(anonymous)', file: '/tmp/pm/script.js', line: 8, column: 18 }],
    ['JS:~get gx /tmp/pm/sp ace/g.js:1:19', { name: 'get gx', file: '/tmp/pm/sp ace/g.js', line: 1, column: 19 }],
    ['JS:~get /tmp/x.js:1:1', { name: 'get', file: '/tmp/x.js' }],
    ['JS:~inVm vm file.js:1:14', { name: 'inVm', file: 'vm file.js', line: 1, column: 14 }],
    ['JS:~#p /tmp/a.js:3:38', { name: '#p' }],
    ['JS:~été /tmp/a.js:6:23', { name: 'été' }],
    ['JS:~makeRequireFunction node:internal/modules/helpers:133:29', { name: 'makeRequireFunction', file: 'node:internal/modules/helpers', line: 133 }],
    ['Eval:~ :1:1', { name: '(eval)', file: '', line: 1, column: 1, kind: 'interpreted', tag: 'Eval' }],
    ['Script:~ file:///tmp/pm/esm.mjs:1:1', { name: '(top level)', file: '/tmp/pm/esm.mjs', tag: 'Script' }],
    // the same top level compiled on the stack (OSR), and a CommonJS module's wrapper
    ['JS:* file:///tmp/pm/esm.mjs:1:1', { name: '(top level)', file: '/tmp/pm/esm.mjs', kind: 'optimized', tag: 'JS' }],
    ['JS:~ /tmp/pm/mod.cjs:1:1', { name: '(top level)', file: '/tmp/pm/mod.cjs' }],
    ['JS:~ /tmp/pm/mod.cjs:1:2', { name: '(anonymous)' }],
    ['JS:o+retainArrays file:///tmp/deno/app.ts:2:22', { name: 'retainArrays', file: '/tmp/deno/app.ts', kind: 'optimized', tag: 'JS' }],
    ['JS:o*retainArrays file:///tmp/deno/app.ts:2:22', { name: 'retainArrays', kind: 'optimized' }],
    // Node 24 and 26: code specialised to its function context carries a quote after the tier
    ["JS:*'fromString node:buffer:487:20", { name: 'fromString', file: 'node:buffer', line: 487, kind: 'optimized', tag: 'JS' }],
    ["JS:+'createUnsafeBuffer node:internal/buffer:1091:28", { name: 'createUnsafeBuffer', kind: 'optimized' }],
    ["JS:o+'hot /tmp/a.js:7:13", { name: 'hot', kind: 'optimized', line: 7 }],
    ["JS:*' /tmp/pm/mod.cjs:1:1", { name: '(top level)', file: '/tmp/pm/mod.cjs', kind: 'optimized' }],
    // a quote that is no marker (a computed name of a function whose optimisation is disabled) stays
    ["JS:'quoted /tmp/a.js:2:3", { name: "'quoted", kind: 'other', line: 2 }],
    ["JS:~'quoted /tmp/a.js:2:3", { name: "'quoted", kind: 'interpreted' }],
    ['LazyCompile:~foo /old/node.js:5:10', { name: 'foo', file: '/old/node.js', line: 5, kind: 'interpreted', tag: 'LazyCompile' }],
    ['LazyCompile:*foo /old/node.js:5:10', { name: 'foo', kind: 'optimized' }],
    ['Function:~bar /old/node.js:7:1', { name: 'bar', kind: 'interpreted', tag: 'Function' }],
    ['Builtin:ArrayPrototypeMap', { name: 'Builtins_ArrayPrototypeMap', file: '', line: 0, kind: 'builtin' }],
    ['BytecodeHandler:CreateFunctionContext.Wide', { name: 'Builtins_CreateFunctionContextWideHandler', kind: 'builtin' }],
    ['BytecodeHandler:AddExtraWide', { name: 'Builtins_AddExtraWideHandler', kind: 'builtin' }],
    ['RegExp:a(b+)c', { name: 'RegExp:a(b+)c', kind: 'other', tag: 'RegExp' }],
    ['Stub:js-to-wasm:ii:i', { name: 'Stub:js-to-wasm:ii:i', kind: 'other' }],
    ['JS:wasm-function[0]-0-liftoff', { name: 'wasm-function[0]-0-liftoff', kind: 'other', file: '' }],
    ['something odd', { name: 'something odd', kind: 'other', tag: '' }],
  ];
  for (const [raw, want] of cases) {
    const got = parsePerfName(raw);
    for (const [k, v] of Object.entries(want)) assert.equal(got[k as keyof typeof got], v, `${raw}: ${k}`);
  }
});

test('lines: hex with or without 0x; malformed and unfinished lines are skipped', () => {
  const map = parsePerfMap(
    [
      '1000 10 JS:~a /x.js:1:1',
      '0x2000 0x20 JS:*b /x.js:2:1',
      'ZZZZ 10 junk',
      '3000 10',
      '4000 0 JS:~empty /x.js:3:1',
      '',
      '5000 10 Builtin:Tail\r',
      '6000 10 JS:~unfinish',
    ].join('\n'),
  );
  assert.equal(map.entries, 3);
  assert.equal(map.skipped, 5, 'bad hex, no name, zero size, empty line, the unfinished last line');
  assert.equal(map.lookup(0x1000)?.name, 'a');
  assert.equal(map.lookup(0x100f)?.name, 'a');
  assert.equal(map.lookup(0x1010), undefined);
  assert.equal(map.lookup(0xfff), undefined);
  assert.equal(map.lookup(0x201fn)?.name, 'b');
  assert.equal(map.lookup(0x2000)?.kind, 'optimized');
  assert.equal(map.lookup(0x5001)?.raw, 'Builtin:Tail');
  assert.equal(map.lookup(0x6000), undefined);
  const sym = map.lookup(0x2005)!;
  assert.equal(sym.start, 0x2000);
  assert.equal(sym.size, 0x20);
});

test('overlaps: the newest entry containing the address wins; older ones show elsewhere', () => {
  const map = parsePerfMap(
    [
      '1000 100 JS:~old /x.js:1:1', // [0x1000, 0x1100)
      '1040 40 JS:*newer /x.js:2:1', // [0x1040, 0x1080) over it
      '1000 10 JS:~newest /x.js:3:1', // same start, shorter
      '1060 10 JS:~inner /x.js:4:1', // inside newer
      '2000 10 JS:~first /x.js:5:1',
      '2000 10 JS:~second /x.js:6:1', // same range: supersedes
      '3000 10 JS:~a /x.js:7:1',
      '3008 10 JS:~b /x.js:8:1', // partial overlap
    ].join('\n') + '\n',
  );
  const at = (a: number) => map.lookup(a)?.name;
  assert.equal(at(0x1000), 'newest');
  assert.equal(at(0x100f), 'newest');
  assert.equal(at(0x1010), 'old');
  assert.equal(at(0x1040), 'newer');
  assert.equal(at(0x1060), 'inner');
  assert.equal(at(0x1069), 'inner');
  assert.equal(at(0x1070), 'newer');
  assert.equal(at(0x1080), 'old');
  assert.equal(at(0x10ff), 'old');
  assert.equal(at(0x1100), undefined);
  assert.equal(at(0x2005), 'second');
  assert.equal(at(0x3007), 'a');
  assert.equal(at(0x3008), 'b');
  assert.equal(at(0x3017), 'b');
  assert.equal(at(0x3018), undefined);
  assert.equal(parsePerfMap('').lookup(0), undefined);
});

/** Runs `node <flags> script` and returns its perf map (path and text), then deletes the map.
 * Node 20's --perf-basic-prof also writes `isolate-<address>-<pid>-v8.log` into the working
 * directory, so the child runs in a temporary one. */
function runWithPerfMap(script: string, env: Record<string, string> = {}, flags = FLAGS): { path: string; text: string } {
  const cwd = tempDir('mpp-perfmap-');
  const r = spawnSync(process.execPath, [...flags, script], { cwd, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
  assert.ok(readdirSync(cwd).some((f) => /^isolate-.*-v8\.log$/.test(f)), 'V8 wrote its isolate log into the working directory');
  rmSync(cwd, { recursive: true, force: true });
  assert.equal(r.status, 0, r.stderr);
  const pid = Number(r.stdout.split(' ')[0]);
  const path = perfMapPath(pid);
  assert.ok(existsSync(path), `${path} written`);
  const text = readFileSync(path, 'utf8');
  rmSync(path);
  return { path, text };
}

/** 1-based line of the first source line containing `needle`. */
function lineOf(file: string, needle: string): number {
  return readFileSync(file, 'utf8').split('\n').findIndex((l) => l.includes(needle)) + 1;
}

/** Entries whose raw name matches `re`, read with a regex independent of the parser. */
function entries(text: string, re: RegExp): { start: number; size: number; raw: string }[] {
  return text
    .split('\n')
    .map((l) => /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null && re.test(m[3]!))
    .map((m) => ({ start: parseInt(m[1]!, 16), size: parseInt(m[2]!, 16), raw: m[3]! }));
}

/**
 * Node 24 and 26 (V8 13.6, 14.6) mark code specialised to its function context with a quote
 * after the tier (`JS:*'hot`, `JS:+'hot`), Node 20 and 22 never: the map of this Node has them
 * or not as its version says, and no JavaScript name read from it starts with the quote.
 * Control: read as a one-character tier (the reading before), the same map gives quoted names.
 */
function contextSpecialised(text: string, map: ReturnType<typeof parsePerfMap>): void {
  const quoted = entries(text, /^JS:o?[*+]'/);
  if (nodeMajor >= 24) assert.ok(quoted.length > 0, `Node ${process.versions.node}: no context-specialised code in the map`);
  else assert.equal(quoted.length, 0, `Node ${process.versions.node} writes context-specialised markers`);
  for (const e of quoted) {
    const s = map.lookupAt(e.start, Infinity)!;
    if (s.raw !== e.raw) continue; // a newer entry at that address
    assert.ok(!s.name.startsWith("'"), `${e.raw} read as ${s.name}`);
    assert.equal(s.kind, 'optimized');
  }
  const oneChar = quoted.map((e) => e.raw.replace(/^JS:o?[~^*+]/, '').split(' ')[0]!);
  assert.equal(oneChar.filter((n) => n.startsWith("'")).length, quoted.length, 'control: a one-character tier leaves the quote');
}

test('a real map (CommonJS): the hot function optimised and the cold one interpreted, with file and line', () => {
  const script = join(fixtures, 'jit.cjs');
  const { text } = runWithPerfMap(script);
  const map = parsePerfMap(text);
  assert.ok(map.entries > 1000, `${map.entries} entries`);
  assert.ok(text.includes(` ${script}:`), 'CommonJS scripts are named by path');
  assert.equal(map.skipped, 0);

  // optimised code: TurboFan's on Node 20 and 22; Maglev's on 24 and 26 (on by default there),
  // whose TurboFan then inlines hotFunction into driver
  const hot = entries(text, /^JS:o?[*+]'?hotFunction /);
  assert.ok(hot.length > 0, 'optimised code for hotFunction');
  const maglev = entries(text, /^JS:o?\+/).length;
  if (nodeMajor >= 24) assert.ok(maglev > 0, `Node ${process.versions.node}: no Maglev code in the map`);
  else assert.equal(maglev, 0, `Node ${process.versions.node} runs Maglev`);
  contextSpecialised(text, map);
  const cold = entries(text, /^JS:~coldFunction /);
  assert.ok(cold.length > 0, 'interpreted entries for coldFunction');
  assert.equal(entries(text, /^JS:[*+]'?coldFunction /).length, 0, 'coldFunction never optimised');

  const hotLine = lineOf(script, 'function hotFunction');
  const coldLine = lineOf(script, 'function coldFunction');
  for (const e of hot) {
    const s = map.lookup(e.start + (e.size >> 1))!;
    assert.equal(s.name, 'hotFunction');
    assert.equal(s.kind, 'optimized');
    assert.equal(s.file, script);
    assert.equal(s.line, hotLine);
    assert.ok(s.column > 1);
  }
  // the interpreter-trampoline copy (native code) of the cold function
  const trampoline = cold.reduce((a, b) => (b.size > a.size ? b : a));
  const c = map.lookup(BigInt(trampoline.start + trampoline.size - 1))!;
  assert.equal(c.name, 'coldFunction');
  assert.equal(c.kind, 'interpreted');
  assert.equal(c.file, script);
  assert.equal(c.line, coldLine);

  // builtins and bytecode handlers are there too, each named as node's symbol table names it
  // (what run names V8's copy of the builtins by): every one of them is a symbol of node's
  const builtin = entries(text, /^Builtin:/)[0]!;
  assert.equal(map.lookup(builtin.start)?.kind, 'builtin');
  const handler = entries(text, /^BytecodeHandler:/)[0]!;
  assert.equal(map.lookup(handler.start)?.kind, 'builtin');
  const elf = readElf(process.execPath);
  const builtins = [...entries(text, /^Builtin:/), ...entries(text, /^BytecodeHandler:/)];
  assert.ok(builtins.length > 100, `${builtins.length} builtins in the map`);
  // 30 of them, spread over the map, wide handlers among them (a lookup by name scans the table)
  const wide = builtins.filter((e) => /Wide/.test(e.raw)).slice(0, 5);
  const spread = [...builtins.filter((_, i) => i % Math.ceil(builtins.length / 25) === 0), ...wide];
  const unknown = spread.map((e) => map.lookup(e.start)!.name).filter((name) => elf.symbolByName(name) === undefined);
  assert.deepEqual(unknown, [], 'perf-map builtins named as node\'s symbols');
  assert.equal(elf.symbolByName('Builtin:JSEntry'), undefined, 'control: the perf map\'s own spelling is no symbol');
});

test('a real map (ES module): file:// URLs become paths', () => {
  const script = join(fixtures, 'jit.mjs');
  const { path, text } = runWithPerfMap(script);
  assert.match(text, /file:\/\//, 'V8 names module scripts by URL');
  const hot = entries(text, /^JS:o?[*+]'?hotModuleFunction /);
  assert.ok(hot.length > 0, 'optimised code for hotModuleFunction');
  const map = parsePerfMap(text);
  contextSpecialised(text, map);
  const s = map.lookup(hot[0]!.start)!;
  assert.equal(s.file, script);
  assert.equal(s.line, lineOf(script, 'function hotModuleFunction'));
  assert.ok(path.startsWith('/tmp/perf-'));
});

test('NODE_OPTIONS accepts both flags (Node 20): the map is written', () => {
  const script = join(fixtures, 'jit.cjs');
  const { text } = runWithPerfMap(script, { NODE_OPTIONS: FLAGS.join(' ') }, []);
  const map = parsePerfMap(text);
  const cold = entries(text, /^JS:~coldFunction /);
  // --interpreted-frames-native-stack gives interpreted functions native code of their own
  assert.ok(cold.some((e) => e.size >= 0x100), 'a trampoline copy for coldFunction');
  assert.equal(map.lookup(cold[0]!.start)?.name, 'coldFunction');
});

test('readPerfMap reads a file; a missing file throws the fs error', () => {
  assert.throws(() => readPerfMap('/nonexistent/perf-1.map'), { code: 'ENOENT' });
});

test('readPerfMap with a byte limit reads the map as it stood then: a later entry at the same address does not rename it', () => {
  const first = '1000 100 JS:*openStreams /app/a.js:10:1\n';
  const later = '1000 40 RegExp:^libfoo\\.so\n';
  const path = join(tempDir('mpp-perfmap-cut-'), 'perf-1.map');
  writeFileSync(path, first + later);
  assert.equal(readPerfMap(path, Buffer.byteLength(first)).lookup(0x1010)?.name, 'openStreams');
  // the control: the whole map names the frame after the later code
  assert.notEqual(readPerfMap(path).lookup(0x1010)?.name, 'openStreams');
  // a limit inside a line drops that line (as a half-written last line is)
  assert.equal(readPerfMap(path, Buffer.byteLength(first) - 3).lookup(0x1010), undefined);
});

test('lookupAt: an address as it was when the map had been written that far (V8 reused it later)', () => {
  const first = '1000 100 JS:~openStreams /app/a.js:10:1\n';
  const other = '5000 10 JS:~elsewhere /app/a.js:20:1\n';
  const later = '1000 100 JS:~get node:internal/console/constructor:212:14\n';
  const map = parsePerfMap(first + other + later);
  assert.equal(map.lookup(0x1010)?.name, 'get', 'the newest entry, as lookup has always answered');
  assert.equal(map.lookupAt(0x1010, Buffer.byteLength(first + other))?.name, 'openStreams');
  assert.equal(map.lookupAt(0x1010, Buffer.byteLength(first + other + later))?.name, 'get');
  assert.equal(map.lookupAt(0x1010, Buffer.byteLength(first) - 1), undefined, 'before its code was made');
  assert.equal(map.lookupAt(0x5004, Buffer.byteLength(first + other))?.name, 'elsewhere');
  // multi-byte names count in bytes, as the file's size does
  const wide = parsePerfMap('1000 100 JS:~größe /app/ü.js:1:2\n1000 100 JS:~später /app/ü.js:3:2\n');
  assert.equal(wide.lookupAt(0x1001, Buffer.byteLength('1000 100 JS:~größe /app/ü.js:1:2\n'))?.name, 'größe');
});

test('lookupAt: entries that ended before an address never answer for it, and offsets are the file\'s bytes', () => {
  const outer = '100 400 JS:~outer /a.js:1:1\n';
  const mid = '100 100 JS:~mid /a.js:2:1\n';
  const top = '150 4b0 JS:~top /a.js:3:1\n';
  const map = parsePerfMap(outer + mid + top);
  assert.equal(map.lookupAt(0x300, Buffer.byteLength(outer + mid))?.name, 'outer', 'mid ends at 0x200');
  const lone = parsePerfMap('100 100 JS:~old /a.js:1:1\n150 2b0 JS:~newer /a.js:2:1\n');
  assert.equal(lone.lookupAt(0x300, Buffer.byteLength('100 100 JS:~old /a.js:1:1\n')), undefined);
  // a name written as invalid UTF-8 (a lone surrogate, ED A0 80) counts as its three bytes
  const bad = Buffer.concat([Buffer.from('1000 10 JS:~'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from(' /a.js:1:1\n')]);
  const first = Buffer.from('2000 10 JS:~first /a.js:2:1\n');
  const later = Buffer.from('2000 10 JS:~later /a.js:3:1\n');
  const withBad = parsePerfMap(Buffer.concat([bad, first, later]));
  assert.equal(withBad.lookupAt(0x2001, bad.length + first.length)?.name, 'first');
});
