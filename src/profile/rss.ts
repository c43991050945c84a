/**
 * The resident set of a Node process, accounted for: which part of RSS is V8 and Node (the
 * JavaScript heaps), the native memory in use, what the allocator holds beyond it, what
 * libraries mapped themselves, the profiler, code and mapped files, thread stacks, and what
 * none of these claims. Every part but `other` is measured on
 * its own (src/node/rss.ts says how), so `other` — RSS less the parts — tells how complete
 * the account is: a few percent of RSS on a Node process whose memory comes from its heaps.
 *
 * A profile carries its breakdown as one comment, `rss_breakdown: key=value …` in bytes,
 * which `go tool pprof -comments` shows and `parseRssBreakdown` reads back.
 */
import type { Profile } from './pprof.js';

export interface RssBreakdown {
  /** The resident set: the sum of /proc/self/smaps' Rss. */
  rss: number;
  /** V8 and Node: the memory the runtime mapped (every isolate's heap, JIT code, wasm
   * memory), resident. Where owners cannot be told apart, V8's figure for one heap. */
  runtime: number;
  /** V8's heap of the measuring thread's isolate: used and committed (not in the sum). */
  v8Used: number;
  v8Committed: number;
  /** Native memory in use: the profiler's estimate (in the sum unless `nativeExact` is set). */
  nativeInUse: number;
  /** The estimate's standard error (Horvitz–Thompson, from the live samples). */
  nativeStdError: number;
  /** Exact usable bytes in use, where memory events are on (then in the sum instead). */
  nativeExact?: number;
  /** mimalloc's resident memory less the native memory in use (free pages and blocks it
   * keeps), never negative; undefined where mimalloc's mappings cannot be told apart (then in
   * `other`). */
  allocatorOverhead?: number;
  /** Where the native memory in use (the estimate, or the exact figure) comes to more than
   * mimalloc has resident (blocks allocated but never touched, or the estimate above the true
   * figure): by how much. The part "native in use" is then what mimalloc has resident, and the
   * overhead 0. */
  nativeNotResident?: number;
  /** Memory other libraries (addons included) mapped themselves, resident; undefined where
   * owners cannot be told apart (then in `other`). */
  libraries?: number;
  /** The same by library, largest first (not carried in a profile's comment). */
  libraryNames?: { name: string; bytes: number }[];
  /** The profiler's own memory: its tables. */
  profiler: number;
  /** File-backed mappings: executables, libraries, mapped files. */
  code: number;
  /** Thread stacks (of threads blocked in a system call when measured, and the main one). */
  stacks: number;
  /** RSS less every part above, never negative (0 where the parts come to more than RSS). */
  other: number;
  /** How far the parts above come to more than RSS, where they do (then `other` is 0): the
   * anonymous parts are read from the preload library's record (mincore per recorded range),
   * RSS from smaps, a few milliseconds apart, and the two need not agree page for page. Not a
   * part: no part is lowered to make up for it (docs/rss.md). */
  overcount?: number;
}

const KEYS: readonly (keyof RssBreakdown)[] = [
  'rss',
  'runtime',
  'v8Used',
  'v8Committed',
  'nativeInUse',
  'nativeStdError',
  'nativeExact',
  'allocatorOverhead',
  'nativeNotResident',
  'libraries',
  'profiler',
  'code',
  'stacks',
  'other',
  'overcount',
];
const PREFIX = 'rss_breakdown:';

/**
 * A breakdown with `other` never negative: a negative `other` (measured before `overcount`
 * existed, or computed by hand) becomes 0 and its size `overcount`.
 */
export function settleRssBreakdown(b0: RssBreakdown): RssBreakdown {
  let b = b0;
  if (b.allocatorOverhead !== undefined && b.allocatorOverhead < 0) {
    b = { ...b, allocatorOverhead: 0, nativeNotResident: (b.nativeNotResident ?? 0) - b.allocatorOverhead };
  }
  if (b.other < 0) b = { ...b, other: 0, overcount: (b.overcount ?? 0) - b.other };
  return b;
}

/** The parts that add up to `rss` (with `other`), less `overcount` where there is one. */
export function rssParts(b0: RssBreakdown): { name: string; bytes: number }[] {
  const b = settleRssBreakdown(b0);
  const parts = [
    { name: 'V8 and Node', bytes: b.runtime },
    { name: 'native in use', bytes: (b.nativeExact ?? b.nativeInUse) - (b.nativeNotResident ?? 0) },
    ...(b.allocatorOverhead !== undefined ? [{ name: 'allocator overhead', bytes: b.allocatorOverhead }] : []),
    ...(b.libraries !== undefined ? [{ name: 'libraries', bytes: b.libraries }] : []),
    { name: 'profiler', bytes: b.profiler },
    { name: 'code and mapped files', bytes: b.code },
    { name: 'thread stacks', bytes: b.stacks },
  ];
  return [...parts, { name: 'other', bytes: b.other }];
}

export function formatRssComment(b0: RssBreakdown): string {
  const b = settleRssBreakdown(b0);
  const pairs = KEYS.filter((k) => typeof b[k] === 'number').map((k) => `${k}=${Math.round(b[k] as number)}`);
  return `${PREFIX} ${pairs.join(' ')}`;
}

/** The breakdown a profile carries (the last, when merged profiles carry several), or undefined. */
export function parseRssBreakdown(profile: Profile): RssBreakdown | undefined {
  for (const c of [...profile.comment].reverse()) {
    const text = profile.stringTable.strings[Number(c)] ?? '';
    if (!text.startsWith(PREFIX)) continue;
    const values = new Map<string, number>();
    for (const pair of text.slice(PREFIX.length).trim().split(/\s+/)) {
      const m = /^(\w+)=(-?\d+)$/.exec(pair);
      if (m) values.set(m[1]!, Number(m[2]));
    }
    const optional: (keyof RssBreakdown)[] = ['nativeExact', 'allocatorOverhead', 'nativeNotResident', 'libraries', 'overcount'];
    const required = KEYS.filter((k) => !optional.includes(k));
    if (!required.every((k) => values.has(k))) return undefined;
    // a profile written before `other` was kept from going negative reads as it is written now
    return settleRssBreakdown(Object.fromEntries(KEYS.filter((k) => values.has(k)).map((k) => [k, values.get(k)!])) as unknown as RssBreakdown);
  }
  return undefined;
}

/** Human lines, one per part, for a terminal. */
export function formatRssLines(b0: RssBreakdown, human: (n: number) => string): string[] {
  const b = settleRssBreakdown(b0);
  const pct = (n: number) => (b.rss > 0 ? `${((100 * n) / b.rss).toFixed(1)}%` : '');
  const notes: Record<string, string> = {
    'V8 and Node': `the runtime's heaps and code; the main heap: ${human(b.v8Used)} used of ${human(b.v8Committed)} committed`,
    libraries: `mapped by libraries themselves${b.libraryNames?.length ? `: ${b.libraryNames.slice(0, 3).map((l) => `${l.name} ${human(l.bytes)}`).join(', ')}` : ''}`,
    'native in use':
      (b.nativeExact !== undefined
        ? `exact (memory events); the estimate is ${human(b.nativeInUse)} ± ${human(b.nativeStdError)}`
        : `estimate ± ${human(b.nativeStdError)} (1 standard error)`) +
      (b.nativeNotResident
        ? `; resident part only: the ${b.nativeExact !== undefined ? 'figure' : 'estimate'} ${human((b.nativeExact ?? b.nativeInUse))} is ${human(b.nativeNotResident)} more than mimalloc has resident`
        : ''),
    'allocator overhead': "mimalloc's resident memory beyond what is in use",
    profiler: 'its tables',
    'code and mapped files': 'executables, libraries, mapped files',
    'thread stacks': '',
    other: b.allocatorOverhead === undefined ? "anything else, mimalloc's free memory included (not told apart here)" : 'mapped without libc (the loader, raw system calls)',
  };
  const lines = rssParts(b).map(
    (p) => `${human(p.bytes).padStart(10)} ${pct(p.bytes).padStart(6)}  ${p.name.padEnd(22)} ${notes[p.name] ?? ''}`.trimEnd(),
  );
  if (b.overcount !== undefined && b.overcount > 0) {
    lines.push(
      `${''.padStart(19)}  the parts come to ${human(b.overcount)} more than RSS: the anonymous parts are read page by page from the profiler's record, RSS from smaps (docs/rss.md)`,
    );
  }
  return lines;
}
