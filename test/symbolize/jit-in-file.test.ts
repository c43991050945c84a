/**
 * JIT code inside a file's recorded mapping: from Node 22 on V8 maps its copy of the builtins
 * into its code range next to the JIT code, and a dump's record of that copy (the binary at the
 * copy's load bias) can span JIT code below it (seen on Node 24: a hand-dumped profile's
 * JavaScript frames all fell in `node`'s mapping and stayed unnamed). An address of a file's
 * mapping that the file has no name for is named from V8's perf map; one the file names keeps
 * its name. Control: without the perf map the frame is named by its file only (`[file]`, as a
 * stripped object's functions are), never as JavaScript.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { test } from 'node:test';

import { Location, Mapping, type Profile } from '../../src/profile/pprof.js';

import { libraryPath } from '../../src/preload/library.js';
import { readElf } from '../../src/symbolize/elf.js';
import { demangle } from '../../src/symbolize/demangle.js';
import { symbolize } from '../../src/symbolize/index.js';
import { makeProfile } from '../profile/util.js';
import { tempDir } from '../helpers.js';

const BASE = 0x7f0000000000;
// far past the end of the library's file: no segment of it holds this address
const JIT = BASE + 0x10000080;

function profileWith(addresses: number[], file = libraryPath()): Profile {
  const p = makeProfile({ samples: addresses.map(() => ({ stack: ['leaf'], values: [0, 0, 1, 100] })) });
  const mapping = new Mapping({ id: p.mapping.reduce((a, m) => Math.max(a, Number(m.id)), 0) + 1, memoryStart: BASE, memoryLimit: BASE + 0x20000000, fileOffset: 0, filename: p.stringTable.dedup(file) });
  p.mapping.push(mapping);
  let id = p.location.reduce((a, l) => Math.max(a, Number(l.id)), 0);
  addresses.forEach((address, i) => {
    const loc = new Location({ id: ++id, address, mappingId: mapping.id });
    p.location.push(loc);
    p.sample[i]!.locationId = [...p.sample[i]!.locationId, loc.id];
  });
  return p;
}

function outerNames(p: Profile): string[] {
  const str = (x: number | bigint) => p.stringTable.strings[Number(x)] ?? '';
  const fn = new Map(p.function.map((f) => [Number(f.id), str(f.name)]));
  const loc = new Map(p.location.map((l) => [Number(l.id), l.line.length ? fn.get(Number(l.line[0]!.functionId)) : '?']));
  return p.sample.map((s) => loc.get(Number(s.locationId[s.locationId.length - 1]))!);
}

/** An address of the mapping inside one of the library's functions, and that function's name. */
function namedAddress(): { address: number; name: string } {
  const elf = readElf(libraryPath());
  const sym = elf.symbolizer();
  const text = elf.loadSegments.find((g) => (g.flags & 1) !== 0)!; // PF_X
  for (let vaddr = text.vaddr; vaddr < text.vaddr + text.memsz; vaddr += 0x10) {
    const s = sym.lookup(vaddr);
    // the library is mapped whole from offset 0 here: an address is BASE + its file offset
    if (s) return { address: BASE + (vaddr - text.vaddr + text.offset), name: demangle(s.name) };
  }
  throw new Error('no function in the library');
}

test("an address of a file's mapping that the file does not name is named from the perf map; one it names keeps its name", () => {
  const path = join(tempDir('mpp-jit-in-file-'), 'perf-1.map');
  const named = namedAddress();
  writeFileSync(path, `${(JIT - 0x80).toString(16)} 200 JS:~keepIt /app/keep.js:1:16\n${(named.address - 0x10).toString(16)} 100 JS:~shadow /app/keep.js:9:1\n`);
  const p = profileWith([JIT, named.address]);
  const { counts } = symbolize(p, { perfMapPath: path });
  assert.deepEqual(outerNames(p), ['keepIt', named.name]);
  assert.equal(counts.javascript, 1);
});

test('control: without the perf map the frame stays unnamed (not JavaScript, and not the file\'s: it is outside its code)', () => {
  const p = profileWith([JIT]);
  const { counts } = symbolize(p, {});
  assert.deepEqual(outerNames(p), ['?']);
  assert.equal(counts.unnamed, 1);
  assert.equal(counts.javascript + counts.byFile, 0);
});

// A stripped object (sharp's addon and libvips ship so): an address in its code, which no symbol
// names, is named by the file, `[name]`; an address of the same mapping outside its code is not.
test('a stripped file\'s code is named [file]; outside its code the frame stays unnamed', () => {
  const stripped = join(tempDir('mpp-stripped-'), 'libstripped.so');
  copyFileSync(libraryPath(), stripped);
  assert.equal(spawnSync('strip', ['--strip-all', stripped]).status, 0, 'strip');
  // an address in its code that only the stripped local symbols named (the copy keeps .dynsym)
  const elf = readElf(stripped);
  const sym = elf.symbolizer();
  const text = elf.loadSegments.find((g) => (g.flags & 1) !== 0)!; // PF_X
  let local: number | undefined;
  for (let vaddr = text.vaddr + 0x100; vaddr < text.vaddr + text.filesz && local === undefined; vaddr += 0x10) {
    if (!sym.lookup(vaddr)) local = BASE + (vaddr - text.vaddr + text.offset);
  }
  assert.ok(local !== undefined, 'no address of the stripped copy without a symbol');
  const p = profileWith([local, JIT], stripped);
  const { counts } = symbolize(p, {});
  assert.deepEqual(outerNames(p), ['[libstripped.so]', '?']);
  assert.equal(counts.byFile, 1);
  assert.equal(counts.unnamed, 1);
});

test('a frame of a file that is not the one the process mapped (another build ID) keeps no name, for symbolize where the file is', () => {
  const p = profileWith([JIT]);
  p.mapping[p.mapping.length - 1]!.buildId = p.stringTable.dedup('00112233445566778899aabbccddeeff00112233');
  symbolize(p, {});
  assert.deepEqual(outerNames(p), ['?']);
});

// A profile of a process whose files sit elsewhere here (a container's root, qemu's -L prefix):
// the mapping says /opt/app/lib/<library>, which is found under a sysroot.
test('a file found under a sysroot (MIMALLOC_PPROF_SYSROOT or sysroots) is named from there; without it the frame stays an address', () => {
  const root = tempDir('mpp-sysroot-');
  const inside = '/opt/app/lib/libmimalloc-pprof.so';
  mkdirSync(join(root, 'opt', 'app', 'lib'), { recursive: true });
  copyFileSync(libraryPath(), join(root, inside));
  const named = namedAddress();
  const found = profileWith([named.address], inside);
  symbolize(found, { sysroots: [root] });
  assert.deepEqual(outerNames(found), [named.name]);
  const control = profileWith([named.address], inside);
  const { counts } = symbolize(control, { sysroots: [] });
  assert.deepEqual(outerNames(control), ['?']);
  assert.equal(counts.unnamed, 1);
});
