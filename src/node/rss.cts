/**
 * Measures the RSS breakdown (src/profile/rss.ts) of this process, on the thread whose V8
 * heap it reports (the application's). Each part from its own source:
 *  - RSS, code and mapped files: /proc/self/smaps (Rss of every mapping; file-backed ones and
 *    the kernel's [vdso]-like ones are code and files);
 *  - thread stacks: the mappings holding a thread's stack pointer, read from
 *    /proc/self/task/<tid>/syscall (threads blocked in a system call, which is where a
 *    process's other threads are when it is measured), and the main thread's [stack];
 *  - V8 heap: v8.getHeapStatistics() (total_physical_size resident, used, total committed);
 *  - native in use: the profiler's estimate and its standard error (exact counters where
 *    memory events are on);
 *  - mimalloc's resident memory and the profiler's: the preload library
 *    (mi_prof_resident_get: mimalloc's mappings recorded as it makes them, resident bytes
 *    from mincore).
 * What is left is `other`. V8 heaps of worker_threads' isolates fall there.
 */
import { readdirSync, readFileSync } from 'node:fs';
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

/** The breakdown now. Throws when the preload library's figures cannot be read. */
export function measureRss(addon: NativeAddon): RssBreakdown {
  const maps = parseSmaps(readFileSync('/proc/self/smaps', 'utf8'));
  const sps = threadStackPointers();
  const heap = getHeapStatistics();
  const stats = addon.stats();
  const resident = addon.resident();
  let rss = 0;
  let code = 0;
  let stacks = 0;
  for (const m of maps) {
    rss += m.rss;
    if (m.path.startsWith('/') || isKernelMapping(m.path)) code += m.rss;
    else if (m.path === '[stack]' || sps.some((sp) => sp >= m.lo && sp < m.hi)) stacks += m.rss;
  }
  const exact = stats.memoryEvents ? stats.exactLiveBytes : undefined;
  const inUse = exact ?? stats.estimatedLiveBytes;
  const sampled = stats.liveSampledBytes;
  const known = resident !== null && resident.allocatorKnown;
  const tables = resident?.profilerBytes ?? stats.profilerBytes;
  const arena = resident?.arenaResident ?? 0;
  const profiler = tables + Math.max(0, arena - sampled);
  const v8Resident = heap.total_physical_size;
  const accounted = known
    ? v8Resident + resident.allocatorResident + tables + arena + code + stacks
    : v8Resident + inUse + profiler + code + stacks;
  return {
    rss,
    v8Resident,
    v8Used: heap.used_heap_size,
    v8Committed: heap.total_heap_size,
    nativeInUse: stats.estimatedLiveBytes,
    nativeStdError: stats.estimatedLiveBytesStdError ?? 0,
    ...(exact !== undefined ? { nativeExact: exact } : {}),
    ...(known ? { allocatorOverhead: resident.allocatorResident + Math.min(arena, sampled) - inUse } : {}),
    profiler,
    code,
    stacks,
    other: rss - accounted,
  };
}
