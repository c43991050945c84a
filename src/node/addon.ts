/**
 * The Node-API addon (build/mimalloc_pprof.node) as a typed module, loaded once per thread.
 *
 * The addon resolves the preload library's `mi_prof_*` entry points with dlsym when it loads;
 * without the preload every call throws `MPP_ERR_NOT_PRELOADED`. This file turns the addon's
 * coded errors into this package's error classes, and reports why the profiler cannot be
 * used (addon not built, not preloaded, C API version mismatch) without throwing.
 */
import { createRequire } from 'node:module';

import { LibraryVersionError, MimallocPprofError, NotPreloadedError, ProfilerError } from '../errors.js';
import { addonPath } from '../preload/library.js';

/** Exactly what the addon exports (native/addon/addon.c). */
export interface NativeAddon {
  available(): { available: boolean; reason?: string; mimallocVersion?: number };
  start(config: { interval?: number; seed?: number | bigint; accum?: boolean; btMax?: number; maxBytes?: number }): boolean;
  stop(): void;
  reset(): void;
  isRunning(): boolean;
  memorySnapshot(): { liveBytes: number; accumBytes: number; liveCount: number; accumCount: number };
  /** peak: the profile as it stood at the high-water mark of the estimate (mi_prof_dump_peak*). */
  dump(path: string, format: 'proto' | 'text', peak?: boolean): void;
  stats(): NativeStats;
  memoryEvents(enable?: boolean): boolean;
  /** mimalloc's mappings and the profiler's memory (mi_prof_resident_get); null from a library without it. */
  resident(): NativeResident | null;
  /** Leaves the calling thread's allocations out of profiles from now on (mi_prof_thread_exclude); returns the previous setting. */
  excludeThread(exclude: boolean): boolean;
  /** The high-water mark of the estimated in-use bytes since start (mi_prof_peak); null from a library without it. */
  peak(): { bytes: number; unixMs: number; snapshots: number } | null;
  /** Keeps the native stack of each sample V8's sampling heap profiler takes on this thread from now on (mi_prof_js_anchor_arm): 1 armed, 0 not available, -1 failed; absent from an older addon. */
  jsAnchorArm?(): number;
  /** New buckets keep the size of V8's perf map when their stacks were taken (mi_prof_jit_map_track); false from a library without it; absent from an older addon. */
  jitMapTrack?(): boolean;
  /** Those stacks (mi_prof_js_anchors: [number, V8's sample_id, perf map bytes, depth, frames...] each) then [made, live, dropped]; null from a library without them. */
  jsAnchors?(): BigUint64Array | null;
  /** Opens a window (mi_prof_window_open): false with tracking off; null from a library without windows. */
  windowOpen?(): boolean | null;
  /** The open window's figures so far, and closes it when `close` (mi_prof_window_read/close); null when none is open. */
  windowRead?(close: boolean): NativeWindow | null;
}

/** The blocks allocated since a window opened that are still live (mi_prof_window_t). */
export interface NativeWindow {
  liveBytes: number;
  liveCount: number;
  /** More live blocks than the window's set holds met it: the figures are a lower bound. */
  overflowed: boolean;
}

/** The addon's resident object (mi_prof_resident_t and mi_prof_mapping_owners, numbers). */
export interface NativeResident {
  /** false: mimalloc's mappings cannot be told apart here (glibc < 2.35, not x86-64). */
  allocatorKnown: boolean;
  allocatorMapped: number;
  allocatorResident: number;
  /** Bytes mapped that the record could not take. */
  untracked: number;
  /** Always 0: sampled blocks live in mimalloc's heap (the field stays in the C struct). */
  arenaResident: number;
  profilerBytes: number;
  /** All of the library's own memory resident now: what it adds to RSS (absent from a library before resident version 2). */
  profilerResident?: number;
  /** Who mapped the recorded memory: each owner object by its load address ("0x…"; "0x0" unknown). */
  owners: { object: string; mapped: number; resident: number; regions: number }[];
}

/** The addon's stats object (mi_prof_stats_t, numbers). */
export interface NativeStats {
  running: boolean;
  sampleInterval: number;
  liveSamples: number;
  liveSampledBytes: number;
  estimatedLiveBytes: number;
  estimatedLiveObjects: number;
  /** The standard error of estimatedLiveBytes (absent from a library before stats version 2). */
  estimatedLiveBytesStdError?: number;
  accumSamples: number;
  estimatedAccumBytes: number;
  estimatedAccumObjects: number;
  uniqueStacks: number;
  droppedSamples: number;
  profilerBytes: number;
  memoryEvents: boolean;
  exactLiveBytes: number;
  exactLiveObjects: number;
  exactAccumBytes: number;
  exactAccumObjects: number;
  rssBytes: number;
  peakRssBytes: number;
  commitBytes: number;
  peakCommitBytes: number;
  pageFaults: number;
  /** libuv's thread pool is watched: its work carries the stack that queued it. */
  poolWatched: boolean;
  /** Pool work left uncharged because too much was in flight at once (over 8192 items). */
  poolUncharged: number;
}

/** Why the profiler can or cannot be used in this process. */
export interface Availability {
  available: boolean;
  /** Why not, in one sentence (only when `available` is false). */
  reason?: string;
  /** The error every other call fails with (only when `available` is false). */
  code?: 'MPP_ERR_NOT_PRELOADED' | 'MPP_ERR_VERSION';
  /** mimalloc's version as it reports it (e.g. 209 for 2.0.9), when available. */
  mimallocVersion?: number;
}

let loaded: { addon?: NativeAddon; error?: string } | undefined;

function load(): { addon?: NativeAddon; error?: string } {
  if (loaded) return loaded;
  try {
    const require = createRequire(import.meta.url);
    loaded = { addon: require(addonPath()) as NativeAddon };
  } catch (e) {
    loaded = { error: `the Node addon cannot be loaded: ${e instanceof Error ? e.message : String(e)}` };
  }
  return loaded;
}

let availability: Availability | undefined;

/** Whether the profiler can be used, and if not why; never throws. Cached per thread. */
export function checkAvailability(): Availability {
  if (availability) return availability;
  const { addon, error } = load();
  if (!addon) {
    availability = { available: false, reason: error, code: 'MPP_ERR_NOT_PRELOADED' };
    return availability;
  }
  const a = addon.available();
  if (!a.available) {
    availability = {
      available: false,
      reason: a.reason ?? 'not preloaded: start the process with LD_PRELOAD="$(npx mimalloc-pprof lib)"',
      code: 'MPP_ERR_NOT_PRELOADED',
    };
    return availability;
  }
  try {
    addon.stats();
  } catch (e) {
    const mismatch = (e as { code?: string }).code === 'MPP_ERR_VERSION';
    availability = {
      available: false,
      reason: mismatch
        ? 'library version mismatch: the preload library in this process speaks another version of the C API than this package (use the library of the same mimalloc-pprof install: LD_PRELOAD="$(npx mimalloc-pprof lib)")'
        : `the preload library does not answer: ${e instanceof Error ? e.message : String(e)}`,
      code: mismatch ? 'MPP_ERR_VERSION' : 'MPP_ERR_NOT_PRELOADED',
    };
    return availability;
  }
  availability = { available: true, ...(a.mimallocVersion !== undefined ? { mimallocVersion: a.mimallocVersion } : {}) };
  return availability;
}

/** Converts an error thrown by the addon into this package's typed errors. */
export function translate(e: unknown): unknown {
  if (e instanceof MimallocPprofError) return e;
  const code = (e as { code?: unknown }).code;
  const message = e instanceof Error ? e.message : String(e);
  switch (code) {
    case 'MPP_ERR_NOT_PRELOADED':
      return new NotPreloadedError(message);
    case 'MPP_ERR_VERSION':
      return new LibraryVersionError(message);
    case 'MPP_ERR_START':
    case 'MPP_ERR_DUMP':
      return new ProfilerError(message);
    case 'MPP_ERR_ARGUMENT':
      return new TypeError(message);
    default:
      return e;
  }
}

/** The addon, when the profiler is available; else throws the typed error naming why. */
export function requireAddon(): NativeAddon {
  const a = checkAvailability();
  if (!a.available) {
    const message = `mimalloc-pprof: the profiler is not available in this process: ${a.reason ?? 'unknown reason'}`;
    throw a.code === 'MPP_ERR_VERSION' ? new LibraryVersionError(message) : new NotPreloadedError(message);
  }
  return load().addon!;
}

/** Runs `fn` with the addon, translating its errors. */
export function withAddon<T>(fn: (addon: NativeAddon) => T): T {
  const addon = requireAddon();
  try {
    return fn(addon);
  } catch (e) {
    throw translate(e);
  }
}
