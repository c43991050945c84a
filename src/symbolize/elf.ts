/**
 * A reader for the parts of ELF files that name addresses in native heap profiles: the ELF
 * header, the PT_LOAD segments, the GNU build ID and the FUNC/IFUNC symbols of `.symtab` and
 * `.dynsym`. ELF64 little-endian only (x86-64, aarch64, riscv64 …); anything else is an
 * `ElfError`.
 *
 * Rules:
 * - Files are read with `fs.readSync` at offsets: headers and notes in `readElf`, the symbol
 *   and string tables only when `symbolizer()` is first called. `/usr/bin/node` (~100 MB) costs
 *   about 20 MB of reads.
 * - Every offset, size and count read from the file is checked against the file before it is
 *   used, so a malformed file raises `ElfError` (reason `format`) and never loops or reads out
 *   of bounds. I/O failures raise `ElfError` (reason `io`) with the cause attached.
 * - Parsed files are cached per (path, size, mtime, inode); a changed file is parsed again.
 * - Addresses are `number`s: user-space virtual addresses and file offsets are below 2^53; a
 *   value that is not is a format error.
 * - Symbol names are returned as stored (mangled); see `demangle.ts`.
 */
import { createHash } from 'node:crypto';
import { closeSync, fstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync, type BigIntStats } from 'node:fs';
import { dirname, join } from 'node:path';

import { cacheFolder } from '../cache-folder.js';

// ---------------------------------------------------------------------------------------------
// Public types

/** Why an ELF file could not be used. `code` is stable. */
export class ElfError extends Error {
  readonly code = 'MPP_ERR_ELF' as const;
  /** `io`: the file could not be read; `format`: not a valid ELF file or inconsistent;
   * `unsupported`: valid ELF of a kind this reader does not handle (ELF32, big-endian, REL…). */
  readonly reason: 'io' | 'format' | 'unsupported';
  readonly path: string;
  constructor(reason: 'io' | 'format' | 'unsupported', path: string, message: string, options?: { cause?: unknown }) {
    super(`${path}: ${message}`, options);
    this.name = 'ElfError';
    this.reason = reason;
    this.path = path;
  }
}

/** One PT_LOAD program header. `flags` is p_flags (PF_X = 1, PF_W = 2, PF_R = 4). */
export interface LoadSegment {
  vaddr: number;
  memsz: number;
  offset: number;
  filesz: number;
  flags: number;
}

/** A function symbol: its (mangled) name, start and extent in link-time virtual addresses.
 * `size` is st_size, or for a symbol without one the distance to the next function symbol or
 * the end of its section. */
export interface ElfSymbol {
  name: string;
  start: number;
  size: number;
}

export interface ElfSymbolizer {
  /** The function symbol containing the link-time virtual address `vaddr`, preferring symbols
   * with a size; `undefined` outside every function. */
  lookup(vaddr: bigint | number): ElfSymbol | undefined;
  /** Number of distinct function start addresses. */
  readonly count: number;
}

export interface ElfFile {
  readonly path: string;
  /** `EXEC` (fixed addresses) or `DYN` (PIE executables and shared objects). */
  readonly type: 'EXEC' | 'DYN';
  /** e_machine (62 = x86-64, 183 = aarch64). */
  readonly machine: number;
  readonly entry: number;
  /** Lower-case hex of the NT_GNU_BUILD_ID note, '' if there is none. */
  readonly buildId: string;
  readonly loadSegments: readonly LoadSegment[];
  /** Link-time virtual address of a file offset, through the PT_LOAD whose file range contains
   * it; `undefined` if none does. */
  fileOffsetToVaddr(offset: bigint | number): number | undefined;
  /** Link-time virtual address of a runtime address `address` that lies in a mapping of this file
   * starting at `mappingStart` with file offset `mappingOffset` (as in /proc/pid/maps or a
   * profile's Mapping): fileOffsetToVaddr(address − mappingStart + mappingOffset). */
  runtimeToVaddr(address: bigint | number, mappingStart: bigint | number, mappingOffset: bigint | number): number | undefined;
  /** The function symbols of `.symtab` merged with `.dynsym`; read on first call, then kept. */
  symbolizer(): ElfSymbolizer;
  /** The first symbol of any type named `name` (`.symtab`, then `.dynsym`): its value and
   * st_size; `undefined` when there is none. Each call scans the tables. */
  symbolByName(name: string): { value: number; size: number } | undefined;
  /** `length` bytes of the file's contents at link-time virtual address `vaddr` (within one
   * PT_LOAD's file bytes); `undefined` when they are not all in the file. */
  readAtVaddr(vaddr: number, length: number): Buffer | undefined;
}

// ---------------------------------------------------------------------------------------------
// Constants (elf.h)

const ELFCLASS64 = 2;
const ELFDATA2LSB = 1;
const ET_REL = 1;
const ET_EXEC = 2;
const ET_DYN = 3;
const ET_CORE = 4;
const PT_LOAD = 1;
const PT_NOTE = 4;
const SHT_SYMTAB = 2;
const SHT_NOTE = 7;
const SHT_NOBITS = 8;
const SHT_DYNSYM = 11;
const SHN_UNDEF = 0;
const SHN_LORESERVE = 0xff00;
const PN_XNUM = 0xffff;
const STT_FUNC = 2;
const STT_GNU_IFUNC = 10;
const STB_LOCAL = 0;
const STB_GLOBAL = 1;
const STB_WEAK = 2;
const NT_GNU_BUILD_ID = 3;
const EHDR_SIZE = 64;
const PHDR_SIZE = 56;
const SHDR_SIZE = 64;
const SYM_SIZE = 24;
/** Notes larger than this are not read (a build-ID note is 36 bytes). */
const MAX_NOTE_BYTES = 1 << 20;
const CACHE_LIMIT = 64;

interface Section {
  type: number;
  addr: number;
  offset: number;
  size: number;
  link: number;
  entsize: number;
}

// ---------------------------------------------------------------------------------------------
// File access with bounds checks

class Reader {
  constructor(
    readonly path: string,
    readonly fd: number,
    readonly fileSize: number,
  ) {}

  fail(message: string): never {
    throw new ElfError('format', this.path, message);
  }

  /** Reads exactly `length` bytes at `offset`, which must lie inside the file. */
  read(offset: number, length: number, what: string): Buffer {
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 || offset + length > this.fileSize) {
      this.fail(`${what} [${offset}, +${length}) lies outside the file (${this.fileSize} bytes)`);
    }
    const buf = Buffer.alloc(length);
    let done = 0;
    while (done < length) {
      let n: number;
      try {
        n = readSync(this.fd, buf, done, length - done, offset + done);
      } catch (cause) {
        throw new ElfError('io', this.path, `reading ${what}: ${(cause as Error).message}`, { cause });
      }
      if (n === 0) this.fail(`${what}: file ended early (changed while reading?)`);
      done += n;
    }
    return buf;
  }
}

function u64(buf: Buffer, at: number, r: Reader, what: string): number {
  const v = buf.readBigUInt64LE(at);
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) r.fail(`${what} 0x${v.toString(16)} is too large`);
  return Number(v);
}

function toNumber(v: bigint | number): number {
  return typeof v === 'bigint' ? Number(v) : v;
}

// ---------------------------------------------------------------------------------------------
// Parsing

function open(path: string): { fd: number; stat: BigIntStats } {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (cause) {
    throw new ElfError('io', path, `cannot open: ${(cause as Error).message}`, { cause });
  }
  try {
    const stat = fstatSync(fd, { bigint: true });
    if (!stat.isFile()) throw new ElfError('io', path, 'not a regular file');
    return { fd, stat };
  } catch (e) {
    closeSync(fd);
    if (e instanceof ElfError) throw e;
    throw new ElfError('io', path, `cannot stat: ${(e as Error).message}`, { cause: e });
  }
}

function parseNotes(data: Buffer, align: number): string {
  let at = 0;
  const pad = (n: number) => (n + align - 1) & ~(align - 1);
  while (at + 12 <= data.length) {
    const namesz = data.readUInt32LE(at);
    const descsz = data.readUInt32LE(at + 4);
    const type = data.readUInt32LE(at + 8);
    const nameAt = at + 12;
    const descAt = nameAt + pad(namesz);
    const next = descAt + pad(descsz);
    if (descAt + descsz > data.length) return ''; // truncated note: stop, no build ID from it
    if (type === NT_GNU_BUILD_ID && namesz === 4 && data.toString('latin1', nameAt, nameAt + 4) === 'GNU\0' && descsz > 0) {
      return data.toString('hex', descAt, descAt + descsz);
    }
    at = next;
  }
  return '';
}

function parse(path: string, fd: number, stat: BigIntStats): ElfFile {
  if (stat.size > BigInt(Number.MAX_SAFE_INTEGER)) throw new ElfError('unsupported', path, 'file too large');
  const r = new Reader(path, fd, Number(stat.size));
  if (r.fileSize < 16) r.fail(`too short for an ELF header (${r.fileSize} bytes)`);
  const ident = r.read(0, 16, 'e_ident');
  if (ident.readUInt32BE(0) !== 0x7f454c46) r.fail('not an ELF file (bad magic)');
  if (ident[4] !== ELFCLASS64) throw new ElfError('unsupported', path, `ELF class ${ident[4]} (only ELF64 is supported)`);
  if (ident[5] !== ELFDATA2LSB) throw new ElfError('unsupported', path, `ELF data encoding ${ident[5]} (only little-endian is supported)`);
  if (ident[6] !== 1) r.fail(`ELF version ${ident[6]}`);
  const eh = r.read(0, EHDR_SIZE, 'ELF header');
  const etype = eh.readUInt16LE(16);
  if (etype === ET_REL || etype === ET_CORE) throw new ElfError('unsupported', path, `ELF type ${etype === ET_REL ? 'REL' : 'CORE'} (only EXEC and DYN)`);
  if (etype !== ET_EXEC && etype !== ET_DYN) r.fail(`unknown ELF type ${etype}`);
  const machine = eh.readUInt16LE(18);
  const entry = u64(eh, 24, r, 'e_entry');
  const phoff = u64(eh, 32, r, 'e_phoff');
  const shoff = u64(eh, 40, r, 'e_shoff');
  const phentsize = eh.readUInt16LE(54);
  let phnum = eh.readUInt16LE(56);
  const shentsize = eh.readUInt16LE(58);
  let shnum = eh.readUInt16LE(60);

  // Section headers (extended numbering: counts in section 0 when they overflow 16 bits).
  const sections: Section[] = [];
  if (shoff !== 0) {
    if (shentsize !== SHDR_SIZE) r.fail(`e_shentsize ${shentsize} (expected ${SHDR_SIZE})`);
    const first = r.read(shoff, SHDR_SIZE, 'section header 0');
    if (shnum === 0) shnum = u64(first, 32, r, 'section count');
    if (phnum === PN_XNUM) phnum = first.readUInt32LE(44);
    if (shnum * SHDR_SIZE > r.fileSize) r.fail(`section count ${shnum} exceeds the file`);
    const table = r.read(shoff, shnum * SHDR_SIZE, 'section header table');
    for (let i = 0; i < shnum; i++) {
      const at = i * SHDR_SIZE;
      const s: Section = {
        type: table.readUInt32LE(at + 4),
        addr: u64(table, at + 16, r, `section ${i} sh_addr`),
        offset: u64(table, at + 24, r, `section ${i} sh_offset`),
        size: u64(table, at + 32, r, `section ${i} sh_size`),
        link: table.readUInt32LE(at + 40),
        entsize: u64(table, at + 56, r, `section ${i} sh_entsize`),
      };
      if (i > 0 && s.type !== SHT_NOBITS && s.type !== 0 && s.offset + s.size > r.fileSize) {
        r.fail(`section ${i} [${s.offset}, +${s.size}) lies outside the file (${r.fileSize} bytes)`);
      }
      sections.push(s);
    }
  }

  // Program headers.
  const loadSegments: LoadSegment[] = [];
  const noteSegments: { offset: number; size: number; align: number }[] = [];
  if (phnum > 0) {
    if (phentsize !== PHDR_SIZE) r.fail(`e_phentsize ${phentsize} (expected ${PHDR_SIZE})`);
    if (phnum * PHDR_SIZE > r.fileSize) r.fail(`program header count ${phnum} exceeds the file`);
    const table = r.read(phoff, phnum * PHDR_SIZE, 'program header table');
    for (let i = 0; i < phnum; i++) {
      const at = i * PHDR_SIZE;
      const type = table.readUInt32LE(at);
      if (type !== PT_LOAD && type !== PT_NOTE) continue;
      const flags = table.readUInt32LE(at + 4);
      const offset = u64(table, at + 8, r, `segment ${i} p_offset`);
      const vaddr = u64(table, at + 16, r, `segment ${i} p_vaddr`);
      const filesz = u64(table, at + 32, r, `segment ${i} p_filesz`);
      const memsz = u64(table, at + 40, r, `segment ${i} p_memsz`);
      const align = u64(table, at + 48, r, `segment ${i} p_align`);
      if (offset + filesz > r.fileSize) r.fail(`segment ${i} [${offset}, +${filesz}) lies outside the file (${r.fileSize} bytes)`);
      if (type === PT_LOAD) {
        if (memsz < filesz) r.fail(`segment ${i} p_memsz < p_filesz`);
        if (!Number.isSafeInteger(vaddr + memsz)) r.fail(`segment ${i} ends beyond 2^53`);
        loadSegments.push({ vaddr, memsz, offset, filesz, flags });
      } else {
        noteSegments.push({ offset, size: filesz, align: align === 8 ? 8 : 4 });
      }
    }
  }

  // Build ID: PT_NOTE segments first, then SHT_NOTE sections (files without program headers).
  let buildId = '';
  for (const n of noteSegments) {
    if (buildId) break;
    if (n.size > 0 && n.size <= MAX_NOTE_BYTES) buildId = parseNotes(r.read(n.offset, n.size, 'PT_NOTE'), n.align);
  }
  for (const s of sections) {
    if (buildId) break;
    if (s.type === SHT_NOTE && s.size > 0 && s.size <= MAX_NOTE_BYTES) buildId = parseNotes(r.read(s.offset, s.size, 'SHT_NOTE'), 4);
  }

  return new ParsedElf(path, stat, etype === ET_EXEC ? 'EXEC' : 'DYN', machine, entry, buildId, loadSegments, sections);
}

// ---------------------------------------------------------------------------------------------
// Symbols

class Symbolizer implements ElfSymbolizer {
  readonly count: number;
  /** The section index of each string table, in the order of `tabs`'s numbers. */
  tabSections: number[] = [];
  private readonly names: (string | undefined)[];
  /** Largest end among entries 0..i: the backward scan stops once it is ≤ the address. */
  private readonly maxEnd: Float64Array;

  constructor(
    readonly starts: Float64Array,
    readonly ends: Float64Array,
    readonly sized: Uint8Array,
    readonly tabs: Uint8Array,
    readonly nameOffs: Uint32Array,
    private readonly strtabs: Buffer[],
  ) {
    this.count = starts.length;
    this.names = new Array<string | undefined>(this.count);
    this.maxEnd = new Float64Array(this.count);
    let m = 0;
    for (let i = 0; i < this.count; i++) {
      m = Math.max(m, ends[i]!);
      this.maxEnd[i] = m;
    }
  }

  private name(i: number): string {
    let n = this.names[i];
    if (n === undefined) {
      const tab = this.strtabs[this.tabs[i]!]!;
      const off = this.nameOffs[i]!;
      let end = tab.indexOf(0, off);
      if (end < 0) end = tab.length;
      n = tab.toString('utf8', off, end);
      this.names[i] = n;
    }
    return n;
  }

  lookup(vaddr: bigint | number): ElfSymbol | undefined {
    const a = toNumber(vaddr);
    if (!Number.isFinite(a)) return undefined;
    // last entry with start <= a
    let lo = 0;
    let hi = this.count - 1;
    let idx = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (this.starts[mid]! <= a) {
        idx = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    // The innermost sized symbol containing a, else the innermost unsized one.
    let unsized = -1;
    for (let i = idx; i >= 0 && this.maxEnd[i]! > a; i--) {
      if (this.ends[i]! > a) {
        if (this.sized[i]) return this.symbol(i);
        if (unsized < 0) unsized = i;
      }
    }
    return unsized >= 0 ? this.symbol(unsized) : undefined;
  }

  private symbol(i: number): ElfSymbol {
    return { name: this.name(i), start: this.starts[i]!, size: this.ends[i]! - this.starts[i]! };
  }
}

function readSymbols(r: Reader, sections: Section[]): Symbolizer {
  const strtabs: Buffer[] = [];
  const tabSections: number[] = [];
  // Candidates in parallel arrays (node's tables hold ~10^5 functions: no object per
  // symbol, no BigInt), then one index sort.
  const cStart: number[] = [];
  const cSize: number[] = [];
  const cShndx: number[] = [];
  const cRank: number[] = [];
  const cTab: number[] = [];
  const cName: number[] = [];
  // .symtab before .dynsym: on ties the richer table's entry is kept.
  const tables = [...sections.filter((s) => s.type === SHT_SYMTAB), ...sections.filter((s) => s.type === SHT_DYNSYM)];
  for (const s of tables) {
    if (s.size === 0) continue;
    if (s.entsize !== SYM_SIZE) r.fail(`symbol table entry size ${s.entsize} (expected ${SYM_SIZE})`);
    if (s.size % SYM_SIZE !== 0) r.fail(`symbol table size ${s.size} is not a multiple of ${SYM_SIZE}`);
    const strSec = sections[s.link];
    if (!strSec || s.link === 0) r.fail(`symbol table links to missing string table ${s.link}`);
    const strtab = r.read(strSec.offset, strSec.size, 'symbol string table');
    const tab = strtabs.push(strtab) - 1;
    tabSections.push(s.link);
    const data = r.read(s.offset, s.size, 'symbol table');
    const fromSymtab = s.type === SHT_SYMTAB ? 1 : 0;
    for (let at = 0; at < data.length; at += SYM_SIZE) {
      const info = data[at + 4]!;
      const type = info & 0xf;
      if (type !== STT_FUNC && type !== STT_GNU_IFUNC) continue;
      const shndx = data.readUInt16LE(at + 6);
      if (shndx === SHN_UNDEF) continue;
      const valueHi = data.readUInt32LE(at + 12);
      const sizeHi = data.readUInt32LE(at + 20);
      if (valueHi >= 0x200000 || sizeHi >= 0x200000) continue; // beyond 2^53: not a code address
      const value = valueHi * 0x100000000 + data.readUInt32LE(at + 8);
      const size = sizeHi * 0x100000000 + data.readUInt32LE(at + 16);
      if (value === 0 || value + size > Number.MAX_SAFE_INTEGER) continue;
      const nameOff = data.readUInt32LE(at);
      if (nameOff >= strtab.length) r.fail(`symbol name offset ${nameOff} beyond its string table (${strtab.length} bytes)`);
      if (strtab[nameOff] === 0) continue; // unnamed
      const bind = info >> 4;
      const bindRank = bind === STB_GLOBAL ? 2 : bind === STB_WEAK ? 1 : 0;
      cStart.push(value);
      cSize.push(size);
      cShndx.push(shndx < SHN_LORESERVE && shndx < sections.length ? shndx : -1);
      // sized > unsized; then binding; then .symtab over .dynsym
      cRank.push((size > 0 ? 8 : 0) + bindRank * 2 + fromSymtab);
      cTab.push(tab);
      cName.push(nameOff);
    }
  }
  const order = Uint32Array.from({ length: cStart.length }, (_, i) => i);
  order.sort((x, y) => cStart[x]! - cStart[y]! || cRank[y]! - cRank[x]! || cSize[y]! - cSize[x]!);
  // one entry per start address (the best ranked)
  const uniq: number[] = [];
  for (const i of order) if (uniq.length === 0 || cStart[uniq[uniq.length - 1]!] !== cStart[i]) uniq.push(i);
  const n = uniq.length;
  const starts = new Float64Array(n);
  const ends = new Float64Array(n);
  const sized = new Uint8Array(n);
  const tabs = new Uint8Array(n);
  const nameOffs = new Uint32Array(n);
  for (let k = 0; k < n; k++) {
    const i = uniq[k]!;
    const start = cStart[i]!;
    const size = cSize[i]!;
    starts[k] = start;
    tabs[k] = cTab[i]!;
    nameOffs[k] = cName[i]!;
    if (size > 0) {
      ends[k] = start + size;
      sized[k] = 1;
    } else {
      // up to the next function symbol, but not past the end of its own section
      const shndx = cShndx[i]!;
      const sec = shndx >= 0 ? sections[shndx] : undefined;
      const secEnd = sec && start >= sec.addr && start < sec.addr + sec.size ? sec.addr + sec.size : Infinity;
      const next = k + 1 < n ? cStart[uniq[k + 1]!]! : Infinity;
      const end = Math.min(next, secEnd);
      ends[k] = Number.isFinite(end) ? end : start + 1;
    }
  }
  const symbolizer = new Symbolizer(starts, ends, sized, tabs, nameOffs, strtabs);
  symbolizer.tabSections = tabSections;
  return symbolizer;
}

// ---------------------------------------------------------------------------------------------
// The symbol tables on disk: node's ~10^5 functions take half a second to read and sort, each
// run; the sorted arrays of a file (by path, device, inode, size, mtime and build ID) are kept
// in the user's cache folder and read back in milliseconds. The names stay in the ELF file.

const CACHE_MAGIC = 'mimalloc-pprof symbols 1\n';
/** Files kept in the folder; the least recently written beyond it are removed. */
const CACHE_FILES = 64;

/** The folder of the symbol cache: `symbols` in the package's cache folder (src/cache-folder.ts). */
function symbolCacheDir(): string | undefined {
  const base = cacheFolder();
  return base ? join(base, 'symbols') : undefined;
}

function symbolCacheFile(path: string, stat: BigIntStats, buildId: string): string | undefined {
  const dir = symbolCacheDir();
  if (!dir) return undefined;
  const key = `${path}\0${stat.dev}\0${stat.ino}\0${stat.size}\0${stat.mtimeNs}\0${buildId}`;
  return join(dir, `${createHash('sha256').update(key).digest('hex').slice(0, 32)}.bin`);
}

function loadCachedSymbols(file: string, r: Reader, sections: Section[]): Symbolizer | undefined {
  let data: Buffer;
  try {
    data = readFileSync(file);
  } catch {
    return undefined;
  }
  try {
    if (data.toString('latin1', 0, CACHE_MAGIC.length) !== CACHE_MAGIC) return undefined;
    let at = CACHE_MAGIC.length;
    const headerLength = data.readUInt32LE(at);
    at += 4;
    const { n, tabSections } = JSON.parse(data.toString('utf8', at, at + headerLength)) as { n: number; tabSections: number[] };
    at = Math.ceil((at + headerLength) / 8) * 8;
    if (!Number.isInteger(n) || n < 0 || data.length !== at + n * 22) return undefined;
    const copy = <T>(make: (b: ArrayBuffer) => T, bytes: number): T => {
      const b = new ArrayBuffer(bytes);
      new Uint8Array(b).set(data.subarray(at, at + bytes));
      at += bytes;
      return make(b);
    };
    const starts = copy((b) => new Float64Array(b), n * 8);
    const ends = copy((b) => new Float64Array(b), n * 8);
    const nameOffs = copy((b) => new Uint32Array(b), n * 4);
    const sized = copy((b) => new Uint8Array(b), n);
    const tabs = copy((b) => new Uint8Array(b), n);
    const strtabs = tabSections.map((i) => {
      const sec = sections[i];
      if (!sec) throw new Error('no such section');
      return r.read(sec.offset, sec.size, 'symbol string table');
    });
    for (let k = 0; k < n; k++) if (tabs[k]! >= strtabs.length || nameOffs[k]! >= strtabs[tabs[k]!]!.length) return undefined;
    const symbolizer = new Symbolizer(starts, ends, sized, tabs, nameOffs, strtabs);
    symbolizer.tabSections = tabSections;
    return symbolizer;
  } catch {
    return undefined;
  }
}

function storeCachedSymbols(file: string, s: Symbolizer): void {
  try {
    const dir = dirname(file);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const header = Buffer.from(JSON.stringify({ n: s.count, tabSections: s.tabSections }), 'utf8');
    const head = Buffer.alloc(Math.ceil((CACHE_MAGIC.length + 4 + header.length) / 8) * 8);
    head.write(CACHE_MAGIC, 0, 'latin1');
    head.writeUInt32LE(header.length, CACHE_MAGIC.length);
    header.copy(head, CACHE_MAGIC.length + 4);
    const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, Buffer.concat([head, bytes(s.starts), bytes(s.ends), bytes(s.nameOffs), bytes(s.sized), bytes(s.tabs)]), { mode: 0o600 });
    renameSync(tmp, file);
    const kept = readdirSync(dir).filter((f) => f.endsWith('.bin') || f.endsWith('.names.json'));
    if (kept.length > 2 * CACHE_FILES) {
      const byAge = kept.map((f) => ({ f, t: statSync(join(dir, f)).mtimeMs })).sort((a, b) => a.t - b.t);
      for (const { f } of byAge.slice(0, kept.length - 2 * CACHE_FILES)) rmSync(join(dir, f), { force: true });
    }
  } catch {
    // no cache: the next run reads the table again
  }
}

// ---------------------------------------------------------------------------------------------
// The ElfFile object and the cache

class ParsedElf implements ElfFile {
  private symbols: Symbolizer | undefined;

  constructor(
    readonly path: string,
    private readonly stat: BigIntStats,
    readonly type: 'EXEC' | 'DYN',
    readonly machine: number,
    readonly entry: number,
    readonly buildId: string,
    readonly loadSegments: readonly LoadSegment[],
    private readonly sections: Section[],
  ) {}

  fileOffsetToVaddr(offset: bigint | number): number | undefined {
    const off = toNumber(offset);
    for (const s of this.loadSegments) {
      if (off >= s.offset && off < s.offset + s.filesz) return s.vaddr + (off - s.offset);
    }
    return undefined;
  }

  runtimeToVaddr(address: bigint | number, mappingStart: bigint | number, mappingOffset: bigint | number): number | undefined {
    const delta = toNumber(address) - toNumber(mappingStart);
    if (delta < 0) return undefined;
    return this.fileOffsetToVaddr(delta + toNumber(mappingOffset));
  }

  private withFile<T>(f: (r: Reader) => T): T {
    const { fd, stat } = open(this.path);
    try {
      if (stat.size !== this.stat.size || stat.mtimeNs !== this.stat.mtimeNs || stat.ino !== this.stat.ino) {
        throw new ElfError('io', this.path, 'file changed since its headers were read');
      }
      return f(new Reader(this.path, fd, Number(stat.size)));
    } finally {
      closeSync(fd);
    }
  }

  private byName: Record<string, { value: number; size: number } | null> | undefined;

  /** One symbol by its name: a scan of the whole table, so its answers are kept beside the
   * symbol cache (V8's builtins are looked up by name in every run). */
  symbolByName(name: string): { value: number; size: number } | undefined {
    const cached = symbolCacheFile(this.path, this.stat, this.buildId)?.replace(/\.bin$/, '.names.json');
    if (this.byName === undefined) {
      try {
        this.byName = cached ? (JSON.parse(readFileSync(cached, 'utf8')) as Record<string, { value: number; size: number } | null>) : {};
      } catch {
        this.byName = {};
      }
    }
    const known = this.byName[name];
    if (known !== undefined) return known ?? undefined;
    const found = this.withFile((r) => findSymbol(r, this.sections, name));
    this.byName[name] = found ?? null;
    if (cached) {
      try {
        mkdirSync(dirname(cached), { recursive: true, mode: 0o700 });
        const tmp = `${cached}.${process.pid}.tmp`;
        writeFileSync(tmp, JSON.stringify(this.byName), { mode: 0o600 });
        renameSync(tmp, cached);
      } catch {
        // looked up again next time
      }
    }
    return found;
  }

  readAtVaddr(vaddr: number, length: number): Buffer | undefined {
    const seg = this.loadSegments.find((s) => vaddr >= s.vaddr && vaddr + length <= s.vaddr + s.filesz);
    if (!seg) return undefined;
    return this.withFile((r) => r.read(seg.offset + (vaddr - seg.vaddr), length, 'segment bytes'));
  }

  symbolizer(): ElfSymbolizer {
    if (this.symbols) return this.symbols;
    const { fd, stat } = open(this.path);
    try {
      if (stat.size !== this.stat.size || stat.mtimeNs !== this.stat.mtimeNs || stat.ino !== this.stat.ino) {
        throw new ElfError('io', this.path, 'file changed since its headers were read');
      }
      const r = new Reader(this.path, fd, Number(stat.size));
      const cached = symbolCacheFile(this.path, stat, this.buildId);
      const loaded = cached ? loadCachedSymbols(cached, r, this.sections) : undefined;
      this.symbols = loaded ?? readSymbols(r, this.sections);
      // tables worth keeping: reading a small one is as quick as reading its cache
      if (cached && !loaded && this.symbols.count >= 2048) storeCachedSymbols(cached, this.symbols);
      return this.symbols;
    } finally {
      closeSync(fd);
    }
  }
}

function findSymbol(r: Reader, sections: Section[], name: string): { value: number; size: number } | undefined {
  const want = Buffer.from(`${name}\0`, 'utf8');
  for (const s of [...sections.filter((x) => x.type === SHT_SYMTAB), ...sections.filter((x) => x.type === SHT_DYNSYM)]) {
    if (s.size === 0 || s.entsize !== SYM_SIZE || s.size % SYM_SIZE !== 0) continue;
    const strSec = sections[s.link];
    if (!strSec || s.link === 0) continue;
    const strtab = r.read(strSec.offset, strSec.size, 'symbol string table');
    // the name's offsets in the string table (a suffix shared by a longer name counts too)
    const offsets = new Set<number>();
    for (let at = strtab.indexOf(want); at >= 0; at = strtab.indexOf(want, at + 1)) offsets.add(at);
    if (offsets.size === 0) continue;
    const data = r.read(s.offset, s.size, 'symbol table');
    for (let at = 0; at < data.length; at += SYM_SIZE) {
      if (!offsets.has(data.readUInt32LE(at))) continue;
      if (data.readUInt16LE(at + 6) === SHN_UNDEF) continue;
      return { value: u64(data, at + 8, r, 'st_value'), size: u64(data, at + 16, r, 'st_size') };
    }
  }
  return undefined;
}

const cache = new Map<string, { key: string; elf: ElfFile }>();

function cacheKey(s: BigIntStats): string {
  return `${s.dev}:${s.ino}:${s.size}:${s.mtimeNs}`;
}

/**
 * Reads the ELF header, PT_LOAD segments, section headers and build ID of `path`.
 * Results are cached per (path, size, mtime, inode).
 * @throws ElfError on I/O failure, a malformed file, or an unsupported ELF kind.
 */
export function readElf(path: string): ElfFile {
  let key: string | undefined;
  try {
    key = cacheKey(statSync(path, { bigint: true }));
  } catch {
    // open() below reports it
  }
  const hit = cache.get(path);
  if (hit && key !== undefined && hit.key === key) {
    cache.delete(path);
    cache.set(path, hit); // most recently used last
    return hit.elf;
  }
  const { fd, stat } = open(path);
  try {
    const elf = parse(path, fd, stat);
    cache.delete(path);
    cache.set(path, { key: cacheKey(stat), elf });
    while (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value!);
    return elf;
  } finally {
    closeSync(fd);
  }
}

/** Empties the readElf cache. */
export function clearElfCache(): void {
  cache.clear();
}
