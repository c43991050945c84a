/**
 * The in-process API: `import { profiler } from 'mimalloc-pprof'` in a process that runs
 * under the preload library (LD_PRELOAD="$(npx mimalloc-pprof lib)").
 *
 * Without the preload, `available()` says so and why, and every other call fails with one
 * typed error (NotPreloadedError, code MPP_ERR_NOT_PRELOADED; LibraryVersionError,
 * MPP_ERR_VERSION, for a library of another C API version): synchronous calls throw it,
 * asynchronous ones reject with it. Nothing else happens.
 *
 * JavaScript frames are named from V8's perf map: start Node with
 * `--perf-basic-prof --interpreted-frames-native-stack` (e.g. in NODE_OPTIONS). Without
 * them JavaScript frames stay addresses; native frames are named either way.
 */
import { randomBytes } from 'node:crypto';
import { rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

import { checkAvailability, withAddon, type Availability, type NativeStats, type NativeWindow } from './addon.js';
import { ensureCodeLog } from './code-log.js';
import { perfMapOfThisProcess } from './engine.js';
import { startJsHeap } from './js-heap.js';
import { measureRss } from './rss.cjs';
import type { RssBreakdown } from '../profile/rss.js';
import { snapshots } from './snapshots.js';

export type { Availability } from './addon.js';

/** Options of `profiler.start` (all optional; see the README's environment table). */
export interface StartOptions {
  /** Mean bytes between samples (default MIMALLOC_PROF_SAMPLE_INTERVAL, else 524288). */
  interval?: number;
  /** Reproducible sampling: each thread's stream derives from the seed. */
  seed?: number | bigint;
  /** Also keep allocated (cumulative) figures: needed by /allocs and `?seconds=N`. */
  accum?: boolean;
  /** Stack depth, 1–128 (default 32). */
  btMax?: number;
  /** Cap on the profiler's own memory; samples over it are dropped and counted. */
  maxBytes?: number;
  /** Also sample this thread's JavaScript heap (V8's sampling heap profiler, same interval):
   * profiles then carry it as heap=js samples beside the native heap=native ones. */
  jsHeap?: boolean;
  /** Also profile the profiler's own worker thread (default false: its memory, symbol tables
   * and encoded profiles, is left out from the time it starts). */
  includeProfilerThreads?: boolean;
}

/** The preload library's figures (mi_prof_stats_t): sampled, estimated, exact, process; and
 * the resident set accounted for (the same breakdown a profile carries as a comment). */
export type ProfilerStats = NativeStats & {
  rssBreakdown: RssBreakdown;
  /** The high-water mark of the estimated in-use bytes since start: how much, when (ms since
   * the epoch; 0 before the first), and how many peak snapshots it took (profile({ peak })). */
  peak?: { bytes: number; unixMs: number; snapshots: number };
};

/** The memory-events API's snapshot (C: mi_memory_snapshot, memory-events.h), in usable bytes. */
export interface MemoryEventsSnapshot {
  enabled: boolean;
  /** Usable bytes live now. */
  liveBytes: number;
  /** Usable bytes allocated since tracking was first switched on; a reallocation adds what it grew by. */
  accumBytes: number;
  /** Blocks live now. */
  liveCount: number;
  /** Blocks allocated (reallocations not counted). */
  accumCount: number;
  /** The same as liveCount (the name before the C snapshot's was mirrored). */
  liveObjects: number;
  /** The same as accumCount. */
  accumObjects: number;
}

export type SampleType = 'inuse_space' | 'inuse_objects' | 'alloc_space' | 'alloc_objects';

export interface ProfileOptions {
  /** `proto` (profile.proto, default) or `text` (gperftools heap_v2 annotated with names). */
  format?: 'proto' | 'text';
  /** proto only: gzip it (default true, the `.pb.gz` form every tool reads). */
  gzip?: boolean;
  /** The sample type pprof shows by default (default inuse_space). */
  sampleType?: SampleType;
  /** Run V8's gc first when it is exposed (node --expose-gc); ignored otherwise. */
  gc?: boolean;
  /** The profile as it stood at the high-water mark of the estimated in-use bytes since the
   * profiler started (its comments say how much and when): in-use figures of that moment,
   * allocated totals of now, no JavaScript heap (which is measured now). Default false. */
  peak?: boolean;
  /** The JavaScript heap beside the native heap (heap=js samples). true: starts sampling it
   * now if it is not sampled yet (objects allocated before are not seen); false: leaves it
   * out; default: included when it is sampled (start({ jsHeap: true }), pprofHandler). */
  jsHeap?: boolean;
}

const START_KEYS = new Set(['interval', 'seed', 'accum', 'btMax', 'maxBytes', 'jsHeap', 'includeProfilerThreads']);
const PROFILE_KEYS = new Set(['format', 'gzip', 'sampleType', 'gc', 'jsHeap', 'peak']);
const SAMPLE_TYPES = new Set(['inuse_space', 'inuse_objects', 'alloc_space', 'alloc_objects']);

function checkKeys(what: string, options: object, allowed: Set<string>): void {
  for (const k of Object.keys(options)) if (!allowed.has(k)) throw new TypeError(`${what}: unknown option '${k}'`);
}

function intOption(what: string, name: string, v: unknown, min: number, max: number): void {
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new TypeError(`${what}: ${name} must be an integer from ${min} to ${max}, not ${String(v)}`);
  }
}

/** Checks start options; throws TypeError naming the first bad one. */
export function checkStartOptions(options: StartOptions): void {
  checkKeys('start', options, START_KEYS);
  intOption('start', 'interval', options.interval, 1, Number.MAX_SAFE_INTEGER);
  intOption('start', 'btMax', options.btMax, 1, 128);
  intOption('start', 'maxBytes', options.maxBytes, 0, Number.MAX_SAFE_INTEGER);
  const seed = options.seed;
  if (seed !== undefined && !(typeof seed === 'bigint' ? seed >= 0n && seed < 1n << 64n : Number.isSafeInteger(seed) && seed >= 0)) {
    throw new TypeError(`start: seed must be a non-negative integer (a bigint up to 2^64-1), not ${String(seed)}`);
  }
  if (options.accum !== undefined && typeof options.accum !== 'boolean') throw new TypeError('start: accum must be a boolean');
  if (options.jsHeap !== undefined && typeof options.jsHeap !== 'boolean') throw new TypeError('start: jsHeap must be a boolean');
  if (options.includeProfilerThreads !== undefined && typeof options.includeProfilerThreads !== 'boolean') {
    throw new TypeError('start: includeProfilerThreads must be a boolean');
  }
}

function checkProfileOptions(options: ProfileOptions): void {
  checkKeys('profile', options, PROFILE_KEYS);
  if (options.format !== undefined && options.format !== 'proto' && options.format !== 'text') {
    throw new TypeError(`profile: format must be 'proto' or 'text', not ${String(options.format)}`);
  }
  if (options.sampleType !== undefined && !SAMPLE_TYPES.has(options.sampleType)) {
    throw new TypeError(`profile: sampleType must be one of ${[...SAMPLE_TYPES].join(', ')}, not ${String(options.sampleType)}`);
  }
  if (options.jsHeap !== undefined && typeof options.jsHeap !== 'boolean') throw new TypeError('profile: jsHeap must be a boolean');
  if (options.peak !== undefined && typeof options.peak !== 'boolean') throw new TypeError('profile: peak must be a boolean');
}

/** Runs `fn` as an async call: its errors reject instead of throwing. */
async function later<T>(fn: () => Promise<T>): Promise<T> {
  return fn();
}

/** Writes `data` to `path` atomically (temporary file in the same directory + rename), mode 0600. */
export async function writeFileAtomic(path: string, data: Uint8Array): Promise<void> {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    await writeFile(tmp, data, { mode: 0o600 });
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}

/** The exact counters, enabled on demand (every allocation then takes the slow path). */
export const memoryEvents = {
  /** Starts counting exact live and cumulative bytes and objects; returns whether on. */
  enable(): boolean {
    return withAddon((a) => a.memoryEvents(true));
  },
  /** Stops counting. */
  disable(): boolean {
    return withAddon((a) => a.memoryEvents(false));
  },
  isEnabled(): boolean {
    return withAddon((a) => a.memoryEvents());
  },
  /**
   * The exact figures now (zeros while never enabled): mi_memory_snapshot's. There is no
   * per-change JavaScript callback: a change happens on every allocation of every thread,
   * V8's own included, where JavaScript cannot run; poll the snapshot, or use the profiler's
   * periodic dumps for where the memory is (docs/memory-events.md).
   */
  snapshot(): MemoryEventsSnapshot {
    const enabled = withAddon((a) => a.memoryEvents());
    const s = withAddon((a) => a.memorySnapshot());
    return { enabled, ...s, liveObjects: s.liveCount, accumObjects: s.accumCount };
  },
  /**
   * Opens a window: from now on every block allocated (any thread) is remembered until it is
   * freed, so `window(...)` can tell what was allocated since and is still live, whatever
   * older blocks were freed meanwhile. Needs the counters on (enable) until it closes; one
   * window at a time (opening again starts afresh). Returns false when the counters are off,
   * null when the preload library predates windows.
   */
  openWindow(): boolean | null {
    return withAddon((a) => (a.windowOpen ? a.windowOpen() : null));
  },
  /** The open window's live blocks so far, closing it when `close`; null when none is open. */
  window(close = false): NativeWindow | null {
    return withAddon((a) => (a.windowRead ? a.windowRead(close) : null));
  },
};

export const profiler = {
  /** Whether this process runs under the preload library, and if not why. Never throws. */
  available(): Availability {
    return { ...checkAvailability() };
  },

  /** Starts sampling; false when it was already running (its settings are kept). */
  start(options: StartOptions = {}): boolean {
    checkStartOptions(options);
    const { jsHeap, includeProfilerThreads, ...native } = options;
    if (includeProfilerThreads !== undefined) snapshots.includeProfilerThreads = includeProfilerThreads;
    // each sample's JavaScript frames named by the code at their addresses when it was taken:
    // V8 reuses freed code's addresses, and the perf map as it stands at the dump may name
    // code made since (run gets this from MIMALLOC_PROF_PERF_MAP at load). Before the start,
    // so that every bucket has it.
    if (perfMapOfThisProcess() !== undefined) withAddon((a) => a.jitMapTrack?.());
    const started = withAddon((a) => a.start(native));
    ensureCodeLog(); // from here on, functions the JIT inlines are named as themselves
    if (jsHeap === true) startJsHeap(options.interval ?? (withAddon((a) => a.stats()).sampleInterval || 524288));
    return started;
  },

  /** Stops sampling and discards every sample. */
  stop(): void {
    withAddon((a) => a.stop());
  },

  /** Clears the cumulative (allocated) figures; live samples are kept. */
  reset(): void {
    withAddon((a) => a.reset());
  },

  isRunning(): boolean {
    return withAddon((a) => a.isRunning());
  },

  /** Sampled and estimated figures, exact counters, RSS and commit, the RSS breakdown. */
  stats(): ProfilerStats {
    return withAddon((a) => {
      const peak = a.peak();
      return { ...a.stats(), rssBreakdown: measureRss(a), ...(peak ? { peak } : {}) };
    });
  },

  /**
   * The heap profile now: by default gzipped profile.proto with native and JavaScript frames
   * named (self-contained: `go tool pprof -symbolize=none` shows the same names).
   * Concurrent calls share one dump; the work runs off the event loop.
   */
  profile(options: ProfileOptions = {}): Promise<Buffer> {
    return later(async () => {
      checkProfileOptions(options);
      if (options.jsHeap === true) startJsHeap(withAddon((a) => a.stats()).sampleInterval || 524288);
      const lease = await snapshots.acquire({ gc: options.gc === true, peak: options.peak === true });
      try {
        const data = await lease.render({
          format: options.format ?? 'proto',
          gzip: options.gzip !== false,
          ...(options.jsHeap === false ? { jsHeap: false } : {}),
          ...(options.sampleType ? { defaultSampleType: options.sampleType } : {}),
        });
        return Buffer.from(data); // a copy: the render is shared with concurrent callers
      } finally {
        lease.release();
      }
    });
  },

  /** profile(options) written atomically to `path` (mode 0600). */
  writeProfile(path: string, options: ProfileOptions = {}): Promise<void> {
    return later(async () => {
      if (typeof path !== 'string' || path === '') throw new TypeError('writeProfile: path must be a non-empty string');
      await writeFileAtomic(path, await profiler.profile(options));
    });
  },

  memoryEvents,
};
