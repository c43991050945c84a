/**
 * Executable code that runs outside the mappings the preload library records (it lists the
 * loaded objects' PT_LOAD segments, from the loader), so that a profile's frames there carry
 * no mapping: above all V8's copy of its embedded builtins.
 *
 * V8 (with short builtin calls, the default on x86-64 with 4 GiB of memory or more; Node 20
 * to 26) puts a copy of the binary's embedded blob (the builtins `Builtins_<Name>`, from
 * `v8_Default_embedded_blob_code_`, `v8_Default_embedded_blob_code_size_` bytes) inside its
 * code range at start, per isolate, so that JIT code reaches builtins by near calls
 * (src/heap/code-range.cc, CodeRange::RemapEmbeddedBuiltins), and the builtins then run from
 * the copy: every API callback (`Builtins_CallApiCallback`), construct stub and CEntry called
 * from JavaScript has a frame there. The copy is
 *  - a second mapping of the executable file at the blob's file offset, when OS::RemapPages
 *    can map it (src/base/platform/platform-linux.cc): found in /proc/<pid>/maps;
 *  - an anonymous mapping with the blob's bytes copied in, otherwise (blob not page-aligned,
 *    the binary replaced or deleted, another mount namespace): found by comparing the first
 *    page of each page-aligned place in the anonymous executable mappings with the blob's
 *    first page in the file.
 * Either way a frame at `address` in the copy is the file's code at
 * `fileOffset + (address − start)`, named by the file's symbols like any other.
 *
 * Node 22 and later also log builtins at the copy's addresses in the perf map, Node 20 at
 * the binary's (never a running PC): this module is what names them there.
 */
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';

import { readElf } from './elf.js';

/** A range of runtime addresses that runs a file's code: `address` is the file's bytes at
 * `fileOffset + (address − start)`. */
export interface CodeCopy {
  start: number;
  limit: number;
  file: string;
  fileOffset: number;
}

const PAGE = 4096;

interface MapsLine {
  start: number;
  end: number;
  perms: string;
  offset: number;
  path: string;
}

function parseMaps(text: string): MapsLine[] {
  const out: MapsLine[] = [];
  for (const line of text.split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) ([0-9a-f]+) \S+ \d+ *(.*)$/.exec(line);
    if (!m) continue;
    const start = parseInt(m[1]!, 16);
    const end = parseInt(m[2]!, 16);
    const offset = parseInt(m[4]!, 16);
    if (!Number.isSafeInteger(end) || !Number.isSafeInteger(offset) || end <= start) continue;
    out.push({ start, end, perms: m[3]!, offset, path: m[5]! });
  }
  return out;
}

interface Blob {
  file: string;
  fileOffset: number;
  size: number;
  head: Buffer;
}

const blobs = new Map<string, Blob | null>();

/** The embedded blob of V8 in `file`, when it has one (node, libnode, deno …). */
function blobOf(file: string): Blob | undefined {
  if (!blobs.has(file)) {
    let blob: Blob | null = null;
    try {
      const elf = readElf(file);
      const code = elf.symbolByName('v8_Default_embedded_blob_code_');
      const sizeSym = code ? elf.symbolByName('v8_Default_embedded_blob_code_size_') : undefined;
      const sizeBytes = sizeSym ? elf.readAtVaddr(sizeSym.value, 4) : undefined;
      const size = sizeBytes?.readUInt32LE(0) ?? 0;
      const head = code && size >= HEAD_BYTES ? elf.readAtVaddr(code.value, HEAD_BYTES) : undefined;
      const seg = code ? elf.loadSegments.find((s) => code.value >= s.vaddr && code.value < s.vaddr + s.filesz) : undefined;
      if (code && head && seg) blob = { file, fileOffset: seg.offset + (code.value - seg.vaddr), size, head };
    } catch {
      blob = null;
    }
    blobs.set(file, blob);
  }
  return blobs.get(file) ?? undefined;
}

/** The most bytes of anonymous executable memory searched for a copy. */
const SEARCH_LIMIT = 512 * 1024 * 1024;
const CHUNK = 1024 * 1024;

/** The bytes compared at each page: the blob's first instructions. */
export const HEAD_BYTES = 64;

/**
 * The code copies of a process from its maps (`/proc/<pid>/maps` text): every file-backed
 * executable mapping, and, where `pageHead` can read the process's memory (the first
 * HEAD_BYTES bytes of the page at a page-aligned address, `undefined` where unknown), the
 * copies of V8's embedded blob in anonymous executable memory.
 */
export function findCodeCopies(maps: string, pageHead?: (address: number) => Buffer | undefined): CodeCopy[] {
  const lines = parseMaps(maps).filter((l) => l.perms[2] === 'x');
  const copies: CodeCopy[] = [];
  const files = new Set<string>();
  for (const l of lines) {
    if (!l.path.startsWith('/') || l.path.endsWith(' (deleted)')) continue;
    copies.push({ start: l.start, limit: l.end, file: l.path, fileOffset: l.offset });
    files.add(l.path);
  }
  if (!pageHead) return copies;
  const wanted = [...files].map(blobOf).filter((b): b is Blob => b !== undefined && !fileBacked(copies, b));
  if (wanted.length === 0) return copies;
  let budget = SEARCH_LIMIT / PAGE;
  for (const l of anonymousCode(lines)) {
    for (let at = l.start; at < l.end && budget-- > 0; at += PAGE) {
      const head = pageHead(at);
      if (!head || head.length < HEAD_BYTES) continue;
      for (const b of wanted) {
        if (head.compare(b.head, 0, HEAD_BYTES, 0, HEAD_BYTES) === 0) copies.push({ start: at, limit: at + b.size, file: b.file, fileOffset: b.fileOffset });
      }
    }
  }
  return copies;
}

/** Whether the blob is mapped from its file a second time: the copy is file-backed. */
function fileBacked(copies: CodeCopy[], b: Blob): boolean {
  return copies.filter((c) => c.file === b.file && c.fileOffset <= b.fileOffset && b.fileOffset < c.fileOffset + (c.limit - c.start)).length > 1;
}

function anonymousCode(lines: MapsLine[]): MapsLine[] {
  return lines.filter((l) => l.perms[2] === 'x' && !l.path.startsWith('/') && !['[vdso]', '[vsyscall]', '[vvar]'].includes(l.path));
}

/** The code copies of a running process (`self` or a pid this process may read). */
export function codeCopiesOf(pid: number | 'self'): CodeCopy[] {
  let maps: string;
  try {
    maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
  } catch {
    return [];
  }
  let fd: number | undefined;
  try {
    fd = openSync(`/proc/${pid}/mem`, 'r');
  } catch {
    fd = undefined;
  }
  try {
    return findCodeCopies(maps, fd === undefined ? undefined : memoryReader(fd));
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** Page heads read from a /proc/<pid>/mem descriptor, a few MiB at a time. */
function memoryReader(fd: number): (address: number) => Buffer | undefined {
  let base = -1;
  let chunk: Buffer | undefined;
  return (address) => {
    if (!chunk || address < base || address + HEAD_BYTES > base + chunk.length) {
      base = address;
      const buf = Buffer.allocUnsafe(CHUNK);
      try {
        const n = readSync(fd, buf, 0, CHUNK, address);
        chunk = buf.subarray(0, n);
      } catch {
        // a chunk reaching into unreadable memory: this page alone
        try {
          const one = Buffer.allocUnsafe(HEAD_BYTES);
          chunk = one.subarray(0, readSync(fd, one, 0, HEAD_BYTES, address));
        } catch {
          chunk = undefined;
          return undefined;
        }
      }
    }
    const off = address - base;
    return off + HEAD_BYTES <= chunk.length ? chunk.subarray(off, off + HEAD_BYTES) : undefined;
  };
}

/**
 * What a Node process records of itself for code-copy naming after it has gone (run's exit
 * hook: src/symbolize/proc-snapshot.cts writes it): its maps, and the page heads of its
 * anonymous executable memory as (8-byte address, HEAD_BYTES bytes) records.
 */
export function codeCopiesFromSnapshot(maps: string, heads: Buffer | undefined): CodeCopy[] {
  const byAddress = new Map<number, Buffer>();
  const rec = 8 + HEAD_BYTES;
  if (heads) for (let at = 0; at + rec <= heads.length; at += rec) byAddress.set(Number(heads.readBigUInt64LE(at)), heads.subarray(at + 8, at + rec));
  return findCodeCopies(maps, heads ? (a) => byAddress.get(a) : undefined);
}

/** Address lookup over a set of copies: where they overlap (a worker's copy gone, its
 * addresses given to another's), the one listed last wins. */
export class CodeCopyIndex {
  private readonly sorted: CodeCopy[];
  private readonly rank: number[];
  private readonly maxLimit: number[];
  constructor(copies: readonly CodeCopy[]) {
    const last = new Map<string, number>();
    copies.forEach((c, i) => last.set(`${c.start}:${c.limit}:${c.file}:${c.fileOffset}`, i));
    const kept = [...last.values()].sort((a, b) => copies[a]!.start - copies[b]!.start || a - b);
    this.sorted = kept.map((i) => copies[i]!);
    this.rank = kept;
    this.maxLimit = [];
    let m = 0;
    for (const c of this.sorted) this.maxLimit.push((m = Math.max(m, c.limit)));
  }
  lookup(address: number): CodeCopy | undefined {
    let lo = 0;
    let hi = this.sorted.length - 1;
    let idx = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (this.sorted[mid]!.start <= address) {
        idx = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    let best = -1;
    for (let i = idx; i >= 0 && this.maxLimit[i]! > address; i--) {
      if (address < this.sorted[i]!.limit && (best < 0 || this.rank[i]! > this.rank[best]!)) best = i;
    }
    return best < 0 ? undefined : this.sorted[best];
  }
  get size(): number {
    return this.sorted.length;
  }
}
