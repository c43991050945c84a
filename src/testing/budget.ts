/**
 * Memory budgets for one test: `memoryBudget(fn, { allocated, retained, jsRetained })` runs `fn`
 * and fails (an AssertionError, as node:test and other runners report) when it allocated or
 * kept more than allowed, naming the program's functions that did.
 *
 * The figures are exact, not estimates: the preload library's memory events count every
 * allocation and free (usable bytes) while `fn` runs. `allocated` is process-wide, so what
 * other threads allocate meanwhile counts too (a test runner's own work is small; a worker the
 * test starts is the test's). `retained` is the blocks allocated from the moment `fn` is
 * called (on any thread) that are still live once it returned, two full collections ran and
 * the count held still (V8 frees dropped Buffers' memory on a background sweep): a window
 * (mi_prof_window_*), so what other threads free of their older blocks meanwhile does not
 * lower it, and what `fn` frees of older blocks does not either. A preload library without
 * windows gives the live bytes' process-wide change instead. `jsRetained` is the growth of
 * V8's heap across the same. The names come from the sampling
 * profiler: a profile before and after `fn` (a small interval while it runs, unless the process
 * already profiles), their difference ranked by each sample's deepest function of the program
 * (src/profile/holders.ts), allocated or in use as the budget that failed.
 *
 * It needs the preload library (`npx mimalloc-pprof run -- node --test`, or
 * `LD_PRELOAD="$(npx mimalloc-pprof lib)"` with `NODE_OPTIONS="--perf-basic-prof
 * --interpreted-frames-native-stack"` for JavaScript names); without it, it throws one line that
 * says so.
 */
import { AssertionError } from 'node:assert';
import { gunzipSync } from 'node:zlib';

import { diff } from '../profile/diff.js';
import { holders } from '../profile/holders.js';
import { Profile } from '../profile/pprof.js';
import { memoryEvents, profiler } from '../node/profiler.js';

export interface MemoryLimits {
  /** Native bytes allocated while `fn` runs (usable bytes; a number, or '512k', '4m', '1g'). */
  allocated?: number | string;
  /** Native bytes still in use after `fn` returned and the heap was collected. */
  retained?: number | string;
  /** JavaScript-heap bytes still in use after `fn` returned and the heap was collected. */
  jsRetained?: number | string;
  /** The sampling interval for the names while `fn` runs (default 64 KiB), when the process does not profile already. */
  interval?: number;
}

export interface MemoryUsed {
  allocated: number;
  retained: number;
  jsRetained: number;
}

const HINT =
  'memoryBudget needs the preload library: run the tests under it (npx mimalloc-pprof run -- node --test), or set LD_PRELOAD="$(npx mimalloc-pprof lib)" and NODE_OPTIONS="--perf-basic-prof --interpreted-frames-native-stack"';

/** Bytes from a number or a size with a k/m/g suffix (powers of 1024). */
export function bytesOf(value: number | string, name: string): number {
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return value;
  const m = typeof value === 'string' ? /^(\d+(?:\.\d+)?)\s*([kmg])?i?b?$/i.exec(value.trim()) : null;
  if (!m) throw new TypeError(`memoryBudget: ${name} must be a byte count like 1048576 or '1m', not ${String(value)}`);
  return Math.round(Number(m[1]) * 2 ** ({ k: 10, m: 20, g: 30 }[(m[2] ?? '').toLowerCase() as 'k' | 'm' | 'g'] ?? 0));
}

function human(n: number): string {
  const a = Math.abs(n);
  if (a >= 2 ** 30) return `${(n / 2 ** 30).toFixed(2)}GiB`;
  if (a >= 2 ** 20) return `${(n / 2 ** 20).toFixed(2)}MiB`;
  if (a >= 2 ** 10) return `${(n / 2 ** 10).toFixed(1)}KiB`;
  return `${n}B`;
}

/** V8's full collection, reached without --expose-gc on the command line. */
async function collector(): Promise<() => void> {
  const v8 = await import('node:v8');
  const vm = await import('node:vm');
  v8.setFlagsFromString('--expose-gc');
  return vm.runInNewContext('gc') as () => void;
}

function decode(buf: Buffer): Profile {
  return Profile.decode(buf[0] === 0x1f ? gunzipSync(buf) : buf);
}

/** Waits until `live()` changes by less than 4 KiB over 20 ms, ten tries at most. */
async function settled(live: () => number): Promise<void> {
  for (let i = 0; i < 10; i++) {
    const a = live();
    await new Promise((r) => setTimeout(r, 20));
    if (Math.abs(live() - a) < 4096) return;
  }
}

const liveBytes = (): number => memoryEvents.snapshot().liveBytes;
const windowBytes = (): number => memoryEvents.window()?.liveBytes ?? 0;

/**
 * Runs `fn` (awaited) and checks what it allocated and kept against `limits`; returns the
 * figures. Throws an AssertionError naming the functions over a limit.
 */
export async function memoryBudget(fn: () => unknown, limits: MemoryLimits): Promise<MemoryUsed> {
  if (typeof fn !== 'function') throw new TypeError('memoryBudget: fn must be a function');
  const allowed = {
    allocated: limits.allocated === undefined ? undefined : bytesOf(limits.allocated, 'allocated'),
    retained: limits.retained === undefined ? undefined : bytesOf(limits.retained, 'retained'),
    jsRetained: limits.jsRetained === undefined ? undefined : bytesOf(limits.jsRetained, 'jsRetained'),
  };
  const availability = profiler.available();
  if (!availability.available) throw new Error(`${HINT} (${availability.reason ?? 'not available'})`);
  // one window at a time: a second budget running meanwhile would reset this one's
  if (memoryEvents.window() !== null) throw new Error('memoryBudget: another memoryBudget is running (budgets cannot overlap: run such tests one at a time)');
  const gc = await collector();
  const started = !profiler.isRunning() && profiler.start({ interval: limits.interval ?? 65536, accum: true });
  const eventsWere = memoryEvents.isEnabled();
  if (!eventsWere) memoryEvents.enable();
  let windowed = false;
  try {
    // the names' first profile, decoded, before the collections: its own garbage goes in
    // them, and decoding it later would show in the second
    const profileBefore = decode(await profiler.profile({ jsHeap: false }));
    gc();
    gc();
    // the counts are process-wide: the profiler's worker may still be allocating and freeing
    // for that profile; `fn` starts once the live bytes hold still (at most ~0.2 s)
    await settled(liveBytes);
    const jsBefore = process.memoryUsage().heapUsed;
    const nativeBefore = memoryEvents.snapshot();
    windowed = memoryEvents.openWindow() === true;
    await fn();
    const allocated = memoryEvents.snapshot().accumBytes - nativeBefore.accumBytes;
    gc();
    gc();
    await settled(windowed ? windowBytes : liveBytes);
    const retained = windowed ? (memoryEvents.window(true)?.liveBytes ?? 0) : memoryEvents.snapshot().liveBytes - nativeBefore.liveBytes;
    windowed = false;
    const used: MemoryUsed = { allocated, retained, jsRetained: process.memoryUsage().heapUsed - jsBefore };
    const over: { what: keyof MemoryUsed; sampleType: string }[] = [];
    if (allowed.allocated !== undefined && used.allocated > allowed.allocated) over.push({ what: 'allocated', sampleType: 'alloc_space' });
    if (allowed.retained !== undefined && used.retained > allowed.retained) over.push({ what: 'retained', sampleType: 'inuse_space' });
    if (allowed.jsRetained !== undefined && used.jsRetained > allowed.jsRetained) over.push({ what: 'jsRetained', sampleType: 'inuse_space' });
    if (over.length === 0) return used;
    const change = diff(profileBefore, decode(await profiler.profile({ jsHeap: false })));
    const interval = profiler.stats().sampleInterval;
    const lines = over.map(({ what, sampleType }) => {
      const named = holders(change, sampleType, 3);
      const who =
        named.length > 0
          ? `; most under: ${named.map(([n, b]) => `${n} (${human(b)})`).join(', ')}`
          : `; no sample of the profiler landed in it to name a function (its interval is ${human(interval)}: a smaller one, e.g. run --interval 64k, names smaller figures)`;
      return `${what} ${human(used[what])} > ${human(allowed[what]!)}${who}`;
    });
    throw new AssertionError({ message: `memoryBudget: ${lines.join('; ')}`, actual: used, expected: allowed, operator: 'memoryBudget' });
  } finally {
    if (windowed) memoryEvents.window(true);
    if (!eventsWere) memoryEvents.disable();
    if (started) profiler.stop();
  }
}
