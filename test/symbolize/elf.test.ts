/** The in-process ELF reader, checked against binutils (nm, readelf, strip) as oracles. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { clearElfCache, ElfError, readElf, type ElfFile } from '../../src/symbolize/elf.js';
import { buildDir, root, run, tempDir } from '../helpers.js';

const fixtures = join(root, 'test', 'symbolize', 'fixtures');
const out = join(buildDir, 'symbolize');
const x64 = process.arch === 'x64';

/** Compiles test/symbolize/fixtures/<src> into build/test/symbolize/<name> unless up to date. */
function compile(src: string, name: string, flags: string[] = []): string {
  const file = join(fixtures, src);
  const bin = join(out, name);
  mkdirSync(out, { recursive: true });
  if (existsSync(bin) && statSync(bin).mtimeMs >= statSync(file).mtimeMs) return bin;
  const cxx = src.endsWith('.cc');
  const r = spawnSync(cxx ? 'g++' : 'cc', [cxx ? '-std=c++17' : '-std=gnu11', '-g', '-O1', ...flags, file, '-o', bin], { encoding: 'utf8' });
  assert.equal(r.status, 0, `compiling ${src}: ${r.stderr}`);
  return bin;
}

interface NmSym {
  name: string;
  value: number;
  size: number; // 0 when nm prints none
  section: string;
}

/** Function symbols (FUNC and IFUNC) of the symbol table, from `nm -f sysv`. */
function nmFunctions(bin: string, dynamic = false): NmSym[] {
  const r = run('nm', ['-f', 'sysv', '--defined-only', ...(dynamic ? ['-D'] : []), bin]);
  assert.equal(r.status, 0, r.stderr);
  const syms: NmSym[] = [];
  for (const line of r.stdout.split('\n')) {
    const f = line.split('|').map((s) => s.trim());
    if (f.length < 7 || !/^[0-9a-f]+$/.test(f[1]!)) continue;
    if (f[3] !== 'FUNC' && !/: 10$/.test(f[3]!) && f[3] !== 'IFUNC') continue;
    syms.push({ name: f[0]!.replace(/@.*$/, ''), value: parseInt(f[1]!, 16), size: f[4] ? parseInt(f[4], 16) : 0, section: f[6]! });
  }
  return syms;
}

/** Section address ranges, from `readelf -SW`. */
function sections(bin: string): Map<string, { addr: number; size: number }> {
  const r = run('readelf', ['-SW', bin]);
  const m = new Map<string, { addr: number; size: number }>();
  for (const line of r.stdout.split('\n')) {
    const x = /^\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)/.exec(line);
    if (x) m.set(x[1]!, { addr: parseInt(x[2]!, 16), size: parseInt(x[3]!, 16) });
  }
  return m;
}

function readelfBuildId(bin: string): string {
  return /Build ID: ([0-9a-f]+)/.exec(run('readelf', ['-n', bin]).stdout)?.[1] ?? '';
}

/** Checks every nm function symbol: its start, its last byte, and (sized) one past its end. */
function checkAgainstNm(elf: ElfFile, syms: NmSym[], secs: Map<string, { addr: number; size: number }>): number {
  const namesAt = new Map<number, Set<string>>();
  for (const s of syms) namesAt.set(s.value, (namesAt.get(s.value) ?? new Set()).add(s.name));
  const starts = [...namesAt.keys()].sort((a, b) => a - b);
  const sym = elf.symbolizer();
  let checked = 0;
  for (const s of syms) {
    const names = namesAt.get(s.value)!;
    const at = sym.lookup(s.value);
    assert.ok(at, `${s.name} @0x${s.value.toString(16)}: no symbol`);
    assert.ok(names.has(at.name), `${s.name} @0x${s.value.toString(16)}: got ${at.name}`);
    assert.equal(at.start, s.value, s.name);
    // the last byte: up to st_size, or for unsized symbols the next function or the section end
    const next = starts.find((v) => v > s.value) ?? Infinity;
    const sec = secs.get(s.section);
    const end = s.size > 0 ? s.value + s.size : Math.min(next, sec ? sec.addr + sec.size : Infinity);
    if (Number.isFinite(end) && end > s.value) {
      const last = sym.lookup(BigInt(end - 1));
      assert.ok(last && (names.has(last.name) || last.start > s.value), `${s.name}: last byte 0x${(end - 1).toString(16)} named ${last?.name}`);
      if (s.size > 0) assert.equal(last!.start + last!.size >= end, true);
    }
    checked++;
  }
  return checked;
}

test('C fixture: every FUNC/IFUNC symbol nm lists is found at its start and last byte', { skip: !x64 && 'x86-64 assembly in the fixture' }, () => {
  const bin = compile('elfsyms.c', 'elfsyms');
  clearElfCache();
  const elf = readElf(bin);
  assert.equal(elf.type, 'DYN');
  const syms = nmFunctions(bin);
  for (const n of ['static_helper', 'global_function', 'weak_function', 'alias_function', 'ifunc_function', 'asm_nosize', 'zsec_nosize', 'f30', 'main']) {
    assert.ok(
      syms.some((s) => s.name === n),
      `nm lists ${n}`,
    );
  }
  const secs = sections(bin);
  const n = checkAgainstNm(elf, syms, secs);
  assert.ok(n >= 40, `checked ${n} symbols`);

  const sym = elf.symbolizer();
  // zero-size symbols end at the next function, or at the end of their own section
  const asm = syms.find((s) => s.name === 'asm_nosize')!;
  const next = Math.min(...syms.filter((s) => s.value > asm.value).map((s) => s.value));
  assert.equal(sym.lookup(asm.value)!.size, next - asm.value);
  const zsec = secs.get('zsec')!;
  assert.equal(sym.lookup(zsec.addr + zsec.size - 1)?.name, 'zsec_nosize');
  const afterZsec = sym.lookup(zsec.addr + zsec.size);
  assert.notEqual(afterZsec?.name, 'zsec_nosize', 'an unsized symbol stops at its section end');
  // outside every function
  assert.equal(sym.lookup(0), undefined);
  assert.equal(sym.lookup(0x7fffffffffff), undefined);
  assert.equal(sym.lookup(Number.NaN), undefined);
});

test('C++ fixture: symbols agree with nm; a stripped copy still names exported functions from .dynsym', () => {
  const bin = compile('widgets.cc', 'widgets', ['-rdynamic']);
  const elf = readElf(bin);
  const syms = nmFunctions(bin);
  assert.ok(syms.some((s) => s.name === '_Z12make_widgetsRSt6vectorIPN6shapes6WidgetESaIS2_EEi'));
  assert.ok(checkAgainstNm(elf, syms, sections(bin)) > 20);

  const stripped = join(tempDir(), 'widgets.stripped');
  const r = run('strip', ['--strip-all', '-o', stripped, bin]);
  assert.equal(r.status, 0, r.stderr);
  const s = readElf(stripped);
  assert.equal(run('nm', [stripped]).stderr.includes('no symbols'), true, 'the copy has no .symtab');
  const dyn = nmFunctions(stripped, true);
  assert.ok(dyn.length > 5, 'the copy keeps .dynsym');
  assert.ok(checkAgainstNm(s, dyn, sections(stripped)) === dyn.length);
  const mw = dyn.find((d) => d.name.includes('make_widgets'))!;
  assert.equal(s.symbolizer().lookup(mw.value + 1)?.name, mw.name);
  assert.equal(s.buildId, readelfBuildId(bin), 'strip keeps the build ID');
});

test('build IDs equal readelf -n; none is the empty string', () => {
  const bin = compile('widgets.cc', 'widgets', ['-rdynamic']);
  const id = readelfBuildId(bin);
  assert.match(id, /^[0-9a-f]{40}$/);
  assert.equal(readElf(bin).buildId, id);
  const md5 = compile('elfsyms.c', 'elfsyms-md5', ['-Wl,--build-id=md5']);
  assert.equal(readElf(md5).buildId, readelfBuildId(md5));
  assert.equal(readElf(md5).buildId.length, 32);
  const none = compile('elfsyms.c', 'elfsyms-noid', ['-Wl,--build-id=none']);
  assert.equal(readelfBuildId(none), '');
  assert.equal(readElf(none).buildId, '');
});

test('PT_LOAD segments match readelf -l; runtime addresses translate through the mapping offset', { skip: !x64 && 'x86-64 fixture' }, () => {
  const bin = compile('elfsyms.c', 'elfsyms');
  const elf = readElf(bin);
  const loads = run('readelf', ['-lW', bin])
    .stdout.split('\n')
    .filter((l) => /^\s*LOAD\s/.test(l))
    .map((l) => l.trim().split(/\s+/));
  assert.deepEqual(
    elf.loadSegments.map((s) => [s.offset, s.vaddr, s.filesz, s.memsz]),
    loads.map((f) => [parseInt(f[1]!, 16), parseInt(f[2]!, 16), parseInt(f[4]!, 16), parseInt(f[5]!, 16)]),
  );
  assert.ok(elf.loadSegments.some((s) => (s.flags & 1) === 1), 'an executable segment');

  // a real process: runtime address of global_function and its mapping (start, file offset)
  const r = run(bin, ['where']);
  assert.equal(r.status, 0, r.stderr);
  const [addr, start, offset] = r.stdout.trim().split(' ').map((h) => parseInt(h, 16)) as [number, number, number];
  const expected = nmFunctions(bin).find((s) => s.name === 'global_function')!.value;
  const vaddr = elf.runtimeToVaddr(addr, start, offset);
  assert.equal(vaddr, expected);
  assert.equal(elf.fileOffsetToVaddr(BigInt(addr - start + offset)), expected);
  assert.ok(['global_function', 'alias_function'].includes(elf.symbolizer().lookup(vaddr!)!.name));
  assert.equal(elf.fileOffsetToVaddr(statSync(bin).size + 100), undefined);
  assert.equal(elf.runtimeToVaddr(start - 1, start, offset), undefined);
});

test('/usr/bin/node: build ID, segments and symbol lookups agree with binutils', { skip: !existsSync('/usr/bin/node') && 'no /usr/bin/node' }, () => {
  const node = '/usr/bin/node';
  clearElfCache();
  const t0 = performance.now();
  const elf = readElf(node);
  const t1 = performance.now();
  const sym = elf.symbolizer();
  const t2 = performance.now();
  console.log(`# /usr/bin/node (${(statSync(node).size / 1e6).toFixed(0)} MB): headers ${(t1 - t0).toFixed(1)} ms, symbols ${(t2 - t1).toFixed(0)} ms (${sym.count} functions)`);
  assert.equal(elf.buildId, readelfBuildId(node));
  assert.ok(elf.type === 'EXEC' || elf.type === 'DYN');
  assert.equal(readElf(node), elf, 'cached');

  const syms = nmFunctions(node).filter((s) => s.size > 0);
  assert.ok(syms.length > 1000, `nm lists ${syms.length} sized functions`);
  const namesAt = new Map<number, Set<string>>();
  for (const s of syms) namesAt.set(s.value, (namesAt.get(s.value) ?? new Set()).add(s.name));
  // every 50th symbol, plus node::Start
  const sample = syms.filter((_, i) => i % 50 === 0);
  const start = syms.find((s) => s.name === '_ZN4node5StartEiPPc');
  assert.ok(start, 'nm lists node::Start(int, char**)');
  sample.push(start);
  for (const s of sample) {
    const mid = s.value + Math.floor(s.size / 2);
    const got = sym.lookup(mid);
    // a nested sized symbol may own the middle: then it must contain it and start later
    assert.ok(got && (namesAt.get(s.value)!.has(got.name) || (got.start > s.value && got.start + got.size > mid)), `${s.name}: got ${got?.name}`);
    assert.ok(namesAt.get(s.value)!.has(sym.lookup(s.value)!.name), s.name);
  }
  // node::Start's runtime address in this very process (this test runs on node) translates back
  if (process.execPath === node) {
    const seg = elf.loadSegments.find((g) => start.value >= g.vaddr && start.value < g.vaddr + g.filesz)!;
    const fileOff = seg.offset + (start.value - seg.vaddr) + 4;
    const map = readFileSync('/proc/self/maps', 'utf8')
      .split('\n')
      .map((l) => l.split(/\s+/))
      .map((f) => ({ range: (f[0] ?? '').split('-').map((h) => parseInt(h, 16)), off: parseInt(f[2] ?? '0', 16), file: f[5] }))
      .find((m) => m.file === node && fileOff >= m.off && fileOff < m.off + (m.range[1]! - m.range[0]!));
    assert.ok(map, 'the mapping of node::Start in /proc/self/maps');
    const runtime = map.range[0]! + (fileOff - map.off);
    assert.equal(elf.runtimeToVaddr(runtime, map.range[0]!, map.off), start.value + 4);
    assert.equal(sym.lookup(elf.runtimeToVaddr(BigInt(runtime), map.range[0]!, map.off)!)?.name, '_ZN4node5StartEiPPc');
  }
});

test('cache: same object until the file changes', () => {
  const src = compile('elfsyms.c', 'elfsyms-md5', ['-Wl,--build-id=md5']);
  const dir = tempDir();
  const copy = join(dir, 'copy');
  copyFileSync(src, copy);
  const a = readElf(copy);
  assert.equal(readElf(copy), a);
  utimesSync(copy, new Date(), new Date(Date.now() + 5000));
  const b = readElf(copy);
  assert.notEqual(b, a, 'a new mtime is parsed again');
  copyFileSync(compile('elfsyms.c', 'elfsyms-noid', ['-Wl,--build-id=none']), copy);
  assert.equal(readElf(copy).buildId, '', 'new contents');
});

// ---------------------------------------------------------------------------------------------
// Malformed inputs

interface Hdr {
  phoff: number;
  shoff: number;
  shnum: number;
}

function header(buf: Buffer): Hdr {
  return { phoff: Number(buf.readBigUInt64LE(32)), shoff: Number(buf.readBigUInt64LE(40)), shnum: buf.readUInt16LE(60) };
}

/** Offset of the section header of the first section of `type`. */
function sectionHeader(buf: Buffer, type: number): number {
  const h = header(buf);
  for (let i = 0; i < h.shnum; i++) if (buf.readUInt32LE(h.shoff + i * 64 + 4) === type) return h.shoff + i * 64;
  throw new Error(`no section of type ${type}`);
}

const SHT_SYMTAB = 2;

type Mutation = (b: Buffer) => Buffer;
const cases: [string, Mutation, 'format' | 'unsupported', 'read' | 'symbols'][] = [
  ['empty file', () => Buffer.alloc(0), 'format', 'read'],
  ['10 bytes', (b) => b.subarray(0, 10), 'format', 'read'],
  ['wrong magic', (b) => (b.write('\x7fELG', 0, 'latin1'), b), 'format', 'read'],
  ['ELF32', (b) => ((b[4] = 1), b), 'unsupported', 'read'],
  ['big-endian', (b) => ((b[5] = 2), b), 'unsupported', 'read'],
  ['ELF version 0', (b) => ((b[6] = 0), b), 'format', 'read'],
  ['REL object type', (b) => (b.writeUInt16LE(1, 16), b), 'unsupported', 'read'],
  ['unknown type', (b) => (b.writeUInt16LE(0x1234, 16), b), 'format', 'read'],
  ['header only', (b) => b.subarray(0, 64), 'format', 'read'],
  ['truncated to half', (b) => b.subarray(0, b.length >> 1), 'format', 'read'],
  ['truncated by one byte', (b) => b.subarray(0, b.length - 1), 'format', 'read'],
  ['e_shoff beyond the file', (b) => (b.writeBigUInt64LE(BigInt(b.length + 4096), 40), b), 'format', 'read'],
  ['e_shoff 2^64-1', (b) => (b.writeBigUInt64LE(0xffffffffffffffffn, 40), b), 'format', 'read'],
  ['e_shnum 65535', (b) => (b.writeUInt16LE(0xffff, 60), b), 'format', 'read'],
  ['e_shentsize 40', (b) => (b.writeUInt16LE(40, 58), b), 'format', 'read'],
  ['e_phoff beyond the file', (b) => (b.writeBigUInt64LE(BigInt(b.length), 32), b), 'format', 'read'],
  ['e_phentsize 32', (b) => (b.writeUInt16LE(32, 54), b), 'format', 'read'],
  ['PT_LOAD p_offset garbage', (b) => (b.writeBigUInt64LE(0x7fff_ffff_0000n, header(b).phoff + 56 * 2 + 8), b), 'format', 'read'],
  ['.symtab sh_offset garbage', (b) => (b.writeBigUInt64LE(0x1234_5678_9abcn, sectionHeader(b, SHT_SYMTAB) + 24), b), 'format', 'read'],
  ['.symtab sh_size garbage', (b) => (b.writeBigUInt64LE(0xffff_ffff_ffffn, sectionHeader(b, SHT_SYMTAB) + 32), b), 'format', 'read'],
  ['.symtab sh_link to section 0', (b) => (b.writeUInt32LE(0, sectionHeader(b, SHT_SYMTAB) + 40), b), 'format', 'symbols'],
  ['.symtab sh_link out of range', (b) => (b.writeUInt32LE(9999, sectionHeader(b, SHT_SYMTAB) + 40), b), 'format', 'symbols'],
  ['.symtab sh_entsize 16', (b) => (b.writeBigUInt64LE(16n, sectionHeader(b, SHT_SYMTAB) + 56), b), 'format', 'symbols'],
  [
    'symbol name offset beyond .strtab',
    (b) => {
      const sh = sectionHeader(b, SHT_SYMTAB);
      const off = Number(b.readBigUInt64LE(sh + 24));
      const n = Number(b.readBigUInt64LE(sh + 32)) / 24;
      for (let i = 1; i < n; i++) {
        const info = b[off + i * 24 + 4]! & 0xf;
        if (info === 2) {
          b.writeUInt32LE(0x7fffffff, off + i * 24);
          return b;
        }
      }
      throw new Error('no FUNC symbol');
    },
    'format',
    'symbols',
  ],
];

test('malformed ELF files raise ElfError (table)', () => {
  const good = readFileSync(compile('elfsyms.c', 'elfsyms-md5', ['-Wl,--build-id=md5']));
  const dir = tempDir();
  for (const [i, [what, mutate, reason, stage]] of cases.entries()) {
    const file = join(dir, `case${i}`);
    writeFileSync(file, mutate(Buffer.from(good)));
    let err: unknown;
    let parsedBy: string = 'none';
    try {
      const elf = readElf(file);
      parsedBy = 'read';
      elf.symbolizer().lookup(0x1000);
      parsedBy = 'symbols';
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof ElfError, `${what}: expected ElfError, got ${String(err)}`);
    assert.equal(err.code, 'MPP_ERR_ELF');
    assert.equal(err.reason, reason, `${what}: ${err.message}`);
    assert.equal(parsedBy === 'none' ? 'read' : 'symbols', stage, `${what}: failed at the wrong stage (${err.message})`);
    assert.ok(err.message.startsWith(file), `${what}: message names the file`);
  }
});

test('I/O failures are ElfError(io); a corrupt note only loses the build ID', () => {
  const dir = tempDir();
  for (const p of [join(dir, 'missing'), dir]) {
    assert.throws(() => readElf(p), (e: unknown) => e instanceof ElfError && e.reason === 'io');
  }
  // descsz of the build-ID note made huge: no build ID, no hang, the rest still parses
  const good = readFileSync(compile('elfsyms.c', 'elfsyms-md5', ['-Wl,--build-id=md5']));
  const b = Buffer.from(good);
  let note = -1;
  for (let at = b.indexOf('GNU\0', 0, 'latin1'); at >= 12 && note < 0; at = b.indexOf('GNU\0', at + 1, 'latin1')) {
    if (b.readUInt32LE(at - 4) === 3 && b.readUInt32LE(at - 12) === 4) note = at - 12; // NT_GNU_BUILD_ID
  }
  assert.ok(note > 0, 'found the build-ID note');
  b.writeUInt32LE(0xfffffff0, note + 4);
  const f = join(dir, 'badnote');
  writeFileSync(f, b);
  const elf = readElf(f);
  assert.equal(elf.buildId, '');
  assert.ok(elf.symbolizer().count > 10);
});

test('random corruption never escapes as anything but ElfError', () => {
  const good = readFileSync(compile('elfsyms.c', 'elfsyms-md5', ['-Wl,--build-id=md5']));
  const dir = tempDir();
  const file = join(dir, 'fuzz');
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  const h = header(good);
  // the bytes that steer parsing: ELF header, program headers, section headers
  const regions: [number, number][] = [
    [0, 64],
    [h.phoff, h.phoff + 56 * good.readUInt16LE(56)],
    [h.shoff, h.shoff + 64 * h.shnum],
  ];
  let errors = 0;
  for (let i = 0; i < 400; i++) {
    const b = Buffer.from(good);
    for (let k = 0; k < 1 + Math.floor(rand() * 4); k++) {
      const [lo, hi] = regions[Math.floor(rand() * regions.length)]!;
      b[lo + Math.floor(rand() * (hi - lo))] = Math.floor(rand() * 256);
    }
    writeFileSync(file, b);
    utimesSync(file, new Date(), new Date(1_000_000 + i * 1000)); // defeat the cache
    try {
      const elf = readElf(file);
      const sym = elf.symbolizer();
      for (const v of [0, 0x1000, 0x1196, 0x13a6]) sym.lookup(v);
    } catch (e) {
      assert.ok(e instanceof ElfError, `iteration ${i}: ${String(e)}`);
      errors++;
    }
  }
  assert.ok(errors > 20, `corruption was noticed (${errors} of 400)`);
});
