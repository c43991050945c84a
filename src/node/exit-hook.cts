/**
 * Loaded with `--require` into every Node process that `mimalloc-pprof run` starts.
 *
 * Node frees most of its native memory during its own teardown, before the preload
 * library's at-exit dump runs, so an at-exit profile of a Node process shows almost nothing.
 * This hook takes the profile when the program is done but before that teardown, on the
 * process's 'exit' event, after a full garbage collection (so the profile shows what is
 * retained, not what a collection that happened to run or not left behind; `run --no-gc`
 * skips it). It then stops the profiler, which also cancels the library's at-exit dump.
 *
 * Signals are not this hook's: a JavaScript listener never runs while JavaScript is busy,
 * and its presence changes what SIGINT and SIGTERM do. A signal that ends the program is the
 * preload library's to profile, natively (native/src/signals.c).
 */
import { realpathSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { isMainThread, threadId } from 'node:worker_threads';

type Addon = import('./addon.js', { with: { 'resolution-mode': 'import' } }).NativeAddon;

const dir = process.env.MIMALLOC_PPROF_RUN_DIR;
const addonPath = process.env.MIMALLOC_PPROF_ADDON;

/** V8's collection (full, or `{ type: 'minor' }`), reached without --expose-gc on the command line. */
function fullGc(): ((options?: { type: 'minor' }) => void) | undefined {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const v8 = require('node:v8') as typeof import('node:v8');
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const vm = require('node:vm') as typeof import('node:vm');
    v8.setFlagsFromString('--expose-gc');
    return vm.runInNewContext('gc') as (options?: { type: 'minor' }) => void;
  } catch {
    return undefined;
  }
}

/**
 * V8's sampling heap profiler, started now at the native profile's interval (the JavaScript
 * heap beside the native heap, src/profile/js-heap.ts; `run --no-js-heap` leaves it off).
 * Returns what reads its profile (the in-process session answers synchronously).
 */
function startJsHeap(addon: Addon): (() => unknown) | undefined {
  if (process.env.MIMALLOC_PPROF_JS_HEAP === '0') return undefined;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const inspector = require('node:inspector') as typeof import('node:inspector');
    const session = new inspector.Session();
    session.connect();
    const interval = Number(process.env.MIMALLOC_PROF_SAMPLE_INTERVAL) || 524288;
    // each sample V8 takes from now on keeps its native stack, numbered as V8 numbers its
    // samples from this start (src/profile/js-anchors.ts); MIMALLOC_PPROF_JS_ANCHORS=0: the
    // tests' control, V8's own stacks only
    const anchored = process.env.MIMALLOC_PPROF_JS_ANCHORS !== '0' && addon.jsAnchorArm?.() === 1;
    let started = false;
    session.post('HeapProfiler.startSampling', { samplingInterval: interval }, (err) => {
      started = !err;
    });
    if (!started) return undefined;
    return () => {
      let profile: { samples?: { ordinal?: number }[] } | undefined;
      session.post('HeapProfiler.getSamplingProfile', (err, r) => {
        if (!err) profile = r.profile as typeof profile;
      });
      if (profile === undefined) return undefined;
      if (!anchored) return { interval, profile };
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const { liveAnchors } = require(join(dirname(realpathSync(__filename)), 'js-anchors-read.cjs')) as typeof import('./js-anchors-read.cjs');
      return { interval, profile, anchors: liveAnchors(addon.jsAnchors?.() ?? null, profile.samples ?? []) };
    };
  } catch {
    return undefined;
  }
}

function install(addon: Addon, runDir: string): void {
  const collect = process.env.MIMALLOC_PPROF_NO_GC !== '1';
  const jsHeap = startJsHeap(addon);
  let done = false;
  // V8's sampling profile, read and written with this thread's allocations left out of the
  // native profile (they are not the program's); nothing of it is kept, so that the minor
  // collection after it frees what it made before the JavaScript heap is measured (a 520 KB
  // profile left 20-50 KB that only a full collection frees, Node 20-26: the JavaScript heap
  // said to be freed before the dump is that much under). True when written.
  const writeJsHeap = jsHeap
    ? () => {
        let excluded: boolean | undefined;
        try {
          excluded = addon.excludeThread(true);
          const js = jsHeap();
          if (js === undefined) return false;
          writeFileSync(join(runDir, `jsheap.${process.pid}.json`), JSON.stringify(js));
          return true;
        } catch {
          return false; // the native profile goes on without it
        } finally {
          if (excluded !== undefined) addon.excludeThread(excluded);
        }
      }
    : undefined;
  const dump = () => {
    if (done) return;
    done = true;
    try {
      if (collect) {
        // what the collection frees is said at the end of the run (memory that only
        // unreachable objects held: a script's module scope once it has ended, too)
        const nativeBefore = addon.stats().estimatedLiveBytes;
        const jsBefore = process.memoryUsage().heapUsed;
        // V8's flag set only now, when the program is done. A full collection, then a minor
        // one: V8 frees the backing stores of dead ArrayBuffers (Buffers) on a background
        // sweeper after a collection, and the next collection of either kind first waits for
        // that sweep to finish (Node 20-26: the same bytes freed as by a second full one,
        // which took 200 ms of tsc's exit where a minor one takes a few). Reading V8's
        // sampling profile starts with a full collection of its own (the inspector asks for
        // it, kSamplingForceGC), so with the JavaScript heap on that read is the full one: a
        // second would cost as much again (150 ms of tsc's exit) and free nothing more.
        const gc = fullGc();
        if (!writeJsHeap?.()) gc?.();
        gc?.({ type: 'minor' });
        if (gc) {
          const freed = { nativeBefore, nativeAfter: addon.stats().estimatedLiveBytes, jsBefore, jsAfter: process.memoryUsage().heapUsed };
          writeFileSync(join(runDir, `gc.${process.pid}.json`), JSON.stringify(freed));
        }
      }
      // V8's perf map as the dump sees it: code made afterwards (this hook's own) may take the
      // address of code a sample holds, and must not name it (run reads only this much)
      let perfMapBytes: number | undefined;
      try {
        perfMapBytes = statSync(`/tmp/perf-${process.pid}.map`).size;
      } catch {
        perfMapBytes = undefined;
      }
      if (process.env.MIMALLOC_PPROF_PEAK === '1') addon.dump(join(runDir, `peak.${process.pid}.pb`), 'proto', true);
      addon.dump(join(runDir, `raw.${process.pid}.pb`), 'proto');
      if (perfMapBytes !== undefined) writeFileSync(join(runDir, `perfmap.${process.pid}.json`), JSON.stringify({ bytes: perfMapBytes }));
      // where V8's copy of its builtins was (src/symbolize/code-copies.ts): run names the
      // frames there from the maps and page heads this writes
      try {
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const { snapshotCodeMemory } = require(join(dirname(realpathSync(__filename)), '..', 'symbolize', 'proc-snapshot.cjs')) as typeof import('../symbolize/proc-snapshot.cjs');
        snapshotCodeMemory(runDir, process.pid);
      } catch {
        // /proc unreadable: those frames stay unnamed
      }
      // the resident set accounted for, right after the dump (src/node/rss.cts; reading it
      // allocates, which may run a scavenge that --no-gc's profile must not see); run puts it
      // in the profile's comments and prints it
      try {
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        // beside this file's real path: run reaches the hook through a link in its own folder
        const { measureRss } = require(join(dirname(realpathSync(__filename)), 'rss.cjs')) as typeof import('./rss.cjs');
        writeFileSync(join(runDir, `rss.${process.pid}.json`), JSON.stringify(measureRss(addon)));
      } catch {
        // /proc unreadable: the profile goes without its breakdown
      }
      // --no-gc: after the native dump, which must not see the collection the read starts with
      if (!collect) writeJsHeap?.();
      addon.stop();
    } catch (e) {
      process.stderr.write(`mimalloc-pprof: ${(e as Error).message}\n`);
    }
  };
  process.on('exit', dump);
}

// `run --main-only`: this process is profiled, the processes it starts are not (the preload
// already took itself out of LD_PRELOAD here): they get the NODE_OPTIONS run was given.
const before = process.env.MIMALLOC_PPROF_NODE_OPTIONS;
if (before !== undefined && isMainThread) {
  if (before === '') delete process.env.NODE_OPTIONS;
  else process.env.NODE_OPTIONS = before;
  delete process.env.MIMALLOC_PPROF_NODE_OPTIONS;
}

if (isMainThread && dir && addonPath) {
  // V8's code log, which names the functions the JIT inlined (src/symbolize/v8-log-start.cts)
  if (process.env.MIMALLOC_PPROF_V8_LOG !== '0') {
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const { startV8CodeLog } = require(join(dirname(realpathSync(__filename)), '..', 'symbolize', 'v8-log-start.cjs')) as typeof import('../symbolize/v8-log-start.cjs');
      startV8CodeLog(dir);
    } catch {
      // inlined functions then show as their caller
    }
  }
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const addon = require(addonPath) as Addon;
  if (addon.available().available) install(addon, dir);
  // `run --serve`: the endpoints in the process run started (not in its children: one port)
  const spec = process.env.MIMALLOC_PPROF_SERVE;
  if (spec && String(process.ppid) === process.env.MIMALLOC_PPROF_RUN_PID) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { pathToFileURL } = require('node:url') as typeof import('node:url');
    const module = pathToFileURL(join(dirname(realpathSync(__filename)), '..', 'http', 'run-serve.js')).href;
    (import(module) as Promise<typeof import('../http/run-serve.js')>)
      .then((m) => m.startRunServe(spec))
      .catch((e: unknown) => process.stderr.write(`mimalloc-pprof: --serve ${spec}: ${e instanceof Error ? e.message : String(e)}\n`));
  }
}

// a worker thread's isolate runs its builtins from a copy of its own, unmapped when the worker
// ends: each worker records where it was as it exits (src/symbolize/proc-snapshot.cts)
if (!isMainThread && dir && process.env.MIMALLOC_PROF_DUMP_AT_EXIT) {
  process.on('exit', () => {
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const { snapshotCodeMemory } = require(join(dirname(realpathSync(__filename)), '..', 'symbolize', 'proc-snapshot.cjs')) as typeof import('../symbolize/proc-snapshot.cjs');
      snapshotCodeMemory(dir, process.pid, threadId);
    } catch {
      // /proc unreadable: those frames stay unnamed
    }
  });
}
