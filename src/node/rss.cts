/**
 * Measures the RSS breakdown (src/profile/rss.ts) of this process. V8's statistics of the
 * application's heap are read on its thread (v8HeapFigures); the rest may be read on any
 * thread (the in-process API reads it in its profiling worker, off the event loop). Each part
 * from its own source:
 *  - RSS, code and mapped files: /proc/self/smaps (Rss of every mapping; file-backed ones and
 *    the kernel's [vdso]-like ones are code and files);
 *  - thread stacks: the mappings holding a thread's stack pointer, read from
 *    /proc/self/task/<tid>/syscall (threads blocked in a system call, which is where a
 *    process's other threads are when it is measured), and the main thread's [stack];
 *  - V8 and Node, mimalloc, the profiler, other libraries: the anonymous memory each of them
 *    mapped, resident now (the preload library's record of who mapped what,
 *    native/src/resident.c): V8's heaps of every isolate (the profiling worker's and the
 *    program's worker_threads' too) with the pages it keeps pooled, JIT code, wasm memory;
 *    V8's statistics of this thread's heap add used and committed;
 *  - native in use: the profiler's estimate and its standard error (exact counters where
 *    memory events are on); mimalloc's resident memory beyond it is the allocator's overhead.
 * What is left is `other`: memory mapped without libc's mmap (glibc's thread stacks of running
 * threads, the loader, raw system calls), never negative. The anonymous parts come from the
 * record's residency (mincore, per recorded range) and RSS from smaps; where the parts come to
 * more than RSS (a few hundred KiB on Node: the two readings disagree on pages at the edges of
 * what was read), `other` is 0 and the excess is `overcount`.
 */
import { readdirSync, readFileSync, realpathSync } from 'node:fs';
import { basename } from 'node:path';
import { getHeapStatistics } from 'node:v8';

import type { RssBreakdown } from '../profile/rss.js' with { 'resolution-mode': 'import' };
import type { NativeAddon } from './addon.js' with { 'resolution-mode': 'import' };

interface Mapping {
  lo: bigint;
  hi: bigint;
  path: string;
  rss: number;
}

const HEADER = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \d+\s*(.*)$/;

/** Every mapping of /proc/self/smaps with its resident bytes. */
export function parseSmaps(text: string): Mapping[] {
  const maps: Mapping[] = [];
  let cur: Mapping | undefined;
  for (const line of text.split('\n')) {
    const h = HEADER.exec(line);
    if (h) {
      cur = { lo: BigInt(`0x${h[1]}`), hi: BigInt(`0x${h[2]}`), path: h[3] ?? '', rss: 0 };
      maps.push(cur);
    } else if (cur && line.startsWith('Rss:')) {
      cur.rss = Number(/(\d+)/.exec(line)?.[1] ?? 0) * 1024;
    }
  }
  return maps;
}

/** Stack pointers of this process's threads that are blocked in a system call. */
function threadStackPointers(): bigint[] {
  const sps: bigint[] = [];
  let tids: string[] = [];
  try {
    tids = readdirSync('/proc/self/task');
  } catch {
    return sps;
  }
  for (const tid of tids) {
    try {
      // "nr arg1 … arg6 sp pc" while in a system call; "running" or "-1 sp pc" otherwise
      const f = readFileSync(`/proc/self/task/${tid}/syscall`, 'utf8').trim().split(' ');
      const sp = f.length === 9 ? f[7] : f.length === 3 ? f[1] : undefined;
      if (sp?.startsWith('0x')) sps.push(BigInt(sp));
    } catch {
      // the thread ended, or the kernel keeps the file from us: its stack falls in `other`
    }
  }
  return sps;
}

const isKernelMapping = (path: string) => path === '[vdso]' || path === '[vvar]' || path === '[vvar_vclock]' || path === '[vsyscall]';

type Owner = 'runtime' | 'allocator' | 'profiler' | 'library';

/** What an owner object of mappings is, by its file. */
function ownerKind(path: string, executable: string): Owner {
  const name = basename(path);
  if (path === executable || /^libnode\.so/.test(name)) return 'runtime';
  if (/^libmimalloc-pprof\.so/.test(name)) return 'profiler';
  if (/^libmimalloc(-secure)?\.so/.test(name)) return 'allocator';
  return 'library';
}

function realExecutable(): string {
  try {
    return realpathSync(process.execPath);
  } catch {
    return process.execPath;
  }
}

/** Total resident bytes, from the kernel's one-line summary. */
function rollupRss(): number {
  const m = /^Rss:\s+(\d+) kB/m.exec(readFileSync('/proc/self/smaps_rollup', 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

/** How far RSS may move while the parts are read before they are read again. */
const SETTLED = 0.005;
const TRIES = 4;

/**
 * The breakdown now. Throws when the preload library's figures cannot be read. The mappings
 * and the owners' resident bytes are read one after the other, a few milliseconds apart;
 * memory freed or touched in between (mimalloc returning freed pages, a collection) would
 * land in `other`, so the reading is taken again, up to TRIES times, until RSS moved by less
 * than SETTLED of itself meanwhile; the steadiest is kept.
 */
export function measureRss(addon: NativeAddon, heap: V8HeapFigures = v8HeapFigures()): RssBreakdown {
  let best: { b: RssBreakdown; moved: number } | undefined;
  for (let i = 0; i < TRIES; i++) {
    const b = measureOnce(addon, heap);
    const moved = Math.abs(rollupRss() - b.rss) / b.rss;
    if (!best || moved < best.moved) best = { b, moved };
    if (!(moved > SETTLED)) break; // NaN (no smaps_rollup) stops too
  }
  return best!.b;
}

/** V8's statistics of the calling thread's heap: what measureRss adds beside the runtime's
 * part (and stands in for it where owners are unknown). */
export interface V8HeapFigures {
  used: number;
  committed: number;
  resident: number;
}

export function v8HeapFigures(): V8HeapFigures {
  const h = getHeapStatistics();
  return { used: h.used_heap_size, committed: h.total_heap_size, resident: h.total_physical_size };
}

function measureOnce(addon: NativeAddon, heap: V8HeapFigures): RssBreakdown {
  const stats = addon.stats();
  const sps = threadStackPointers();
  const maps = parseSmaps(readFileSync('/proc/self/smaps', 'utf8'));
  const resident = addon.resident();
  let rss = 0;
  let code = 0;
  let stacks = 0;
  for (const m of maps) {
    rss += m.rss;
    if (m.path.startsWith('/') || isKernelMapping(m.path)) code += m.rss;
    else if (m.path === '[stack]' || sps.some((sp) => sp >= m.lo && sp < m.hi)) stacks += m.rss;
  }
  // who mapped the rest (native/src/resident.c): each owner object by the file mapped at its
  // load address
  const executable = realExecutable();
  const byOwner: Record<Owner, number> = { runtime: 0, allocator: 0, profiler: 0, library: 0 };
  const libraries = new Map<string, number>();
  for (const o of resident?.owners ?? []) {
    const at = BigInt(o.object);
    const path = at === 0n ? '' : (maps.find((m) => m.lo === at)?.path ?? '');
    const kind = path === '' ? 'library' : ownerKind(path, executable);
    byOwner[kind] += o.resident;
    if (kind !== 'library') continue;
    const name = path === '' ? '(unknown)' : basename(path);
    libraries.set(name, (libraries.get(name) ?? 0) + o.resident);
  }
  const exact = stats.memoryEvents ? stats.exactLiveBytes : undefined;
  const inUse = exact ?? stats.estimatedLiveBytes;
  const known = resident !== null && resident.allocatorKnown && byOwner.runtime > 0;
  // mimalloc's part from the library's own sum: the owners' list stops at 256 objects
  if (known) byOwner.allocator = resident.allocatorResident;
  // sampled blocks live in mimalloc's heap with the rest (native memory in use)
  const profiler = resident?.profilerResident ?? (known ? byOwner.profiler : stats.profilerBytes);
  // without owners (glibc < 2.35): V8's figure for this thread's heap stands in for the runtime
  const runtime = known ? byOwner.runtime : heap.resident;
  const accounted = known
    ? byOwner.runtime + byOwner.allocator + profiler + byOwner.library + code + stacks
    : runtime + inUse + profiler + code + stacks;
  return {
    rss,
    runtime,
    v8Used: heap.used,
    v8Committed: heap.committed,
    nativeInUse: stats.estimatedLiveBytes,
    nativeStdError: stats.estimatedLiveBytesStdError ?? 0,
    ...(exact !== undefined ? { nativeExact: exact } : {}),
    // the part in use is an estimate (or counts blocks never touched): where it comes to more
    // than mimalloc has resident, the overhead is 0 and the excess said (docs/rss.md)
    ...(known ? { allocatorOverhead: Math.max(0, byOwner.allocator - inUse), libraries: byOwner.library } : {}),
    ...(known && inUse > byOwner.allocator ? { nativeNotResident: inUse - byOwner.allocator } : {}),
    ...(libraries.size > 0 ? { libraryNames: [...libraries].sort((a, b) => b[1] - a[1]).map(([name, bytes]) => ({ name, bytes })) } : {}),
    profiler,
    code,
    stacks,
    // never negative: where the parts, read from two sources a few milliseconds apart, come to
    // more than RSS, the excess is reported as such (docs/rss.md) and no part is made up for it
    other: Math.max(0, rss - accounted),
    ...(accounted > rss ? { overcount: accounted - rss } : {}),
  };
}
