/**
 * Snapshots of this process's heap profile, shared by every in-process user (profile(),
 * the HTTP handler, periodic dumps, push): at most one dump runs at a time, and whoever asks
 * while one is under way gets that one. The work (the C dump, reading it back, symbolising,
 * diffing, encoding) happens in one worker thread; the event loop only posts messages.
 *
 * A snapshot lives in the worker while someone holds a lease on it; renders of it (heap,
 * allocs, text…) are computed once and shared by the leases. The worker is started on first
 * use, keeps the process alive only while a request is pending, and ends after a while idle.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

import { LibraryVersionError, MimallocPprofError, NotPreloadedError, ProfilerError } from '../errors.js';
import { requireAddon } from './addon.js';
import { ensureCodeLog } from './code-log.js';
import { takeJsHeap } from './js-heap.js';
import { v8HeapFigures } from './rss.cjs';
import type { RenderSpec } from './engine.js';
import type { WorkerRequest, WorkerResponse } from './worker.js';

type Request = WorkerRequest extends infer R ? (R extends { seq: number } ? Omit<R, 'seq'> : never) : never;

function rebuild(error: { name: string; code?: string; message: string }): Error {
  switch (error.code) {
    case 'MPP_ERR_NOT_PRELOADED':
      return new NotPreloadedError(error.message);
    case 'MPP_ERR_VERSION':
      return new LibraryVersionError(error.message);
    case 'MPP_ERR_PROFILER':
      return new ProfilerError(error.message);
  }
  if (error.code?.startsWith('MPP_ERR_')) {
    const e = new MimallocPprofError(error.code as MimallocPprofError['code'], error.message);
    e.name = error.name;
    return e;
  }
  const e = new Error(error.message);
  e.name = error.name;
  return e;
}

/** `execArgv` without --input-type (`--input-type=X` or `--input-type X`), which a worker refuses. */
export function workerExecArgv(execArgv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const a = execArgv[i]!;
    if (a === '--input-type') i++;
    else if (!a.startsWith('--input-type=')) out.push(a);
  }
  return out;
}

/** The worker thread and its message plumbing. */
class ProfilingWorker {
  private worker: Worker | undefined;
  private dumpPath: string | undefined;
  private readonly pending = new Map<number, { resolve: (r: WorkerResponse) => void; reject: (e: Error) => void }>();
  private seq = 0;
  private idle: NodeJS.Timeout | undefined;
  /** Bumped whenever a worker ends: snapshot ids of an earlier epoch are gone. */
  epoch = 0;
  /** Snapshots held in the worker (kept alive while > 0). */
  live = 0;
  idleMs = 30_000;

  call(msg: Request, transfer: ArrayBuffer[] = [], excludeSelf = true): Promise<WorkerResponse> {
    const w = this.ensure(excludeSelf);
    const seq = ++this.seq;
    return new Promise<WorkerResponse>((resolve, reject) => {
      this.pending.set(seq, { resolve, reject });
      this.refresh();
      w.postMessage({ ...msg, seq }, transfer);
    });
  }

  /** The snapshots are no longer needed (ids of an earlier epoch died with their worker). */
  release(ids: number[], epoch: number): void {
    if (epoch !== this.epoch) return;
    this.live -= ids.length;
    if (ids.length > 0) this.worker?.postMessage({ op: 'release', ids } satisfies WorkerRequest);
    this.refresh();
  }

  private ensure(excludeSelf: boolean): Worker {
    if (this.worker) return this.worker;
    // the raw dump's path: written atomically by the library (mode 0600), removed once read
    const dumpPath = join(tmpdir(), `mimalloc-pprof-${process.pid}-${randomBytes(6).toString('hex')}.pb`);
    const w = new Worker(new URL('./worker-entry.js', import.meta.url), {
      workerData: { dumpPath, excludeSelf },
      name: 'mimalloc-pprof',
      // the process's node options, inherited, unless they hold one a worker refuses
      // (`node --input-type=module -e`): then none (V8's flags are the process's anyway)
      ...(workerExecArgv(process.execArgv).length !== process.execArgv.length ? { execArgv: [] } : {}),
    });
    this.dumpPath = dumpPath;
    this.worker = w;
    w.on('message', (m: WorkerResponse) => {
      const p = this.pending.get(m.seq);
      if (!p) return;
      this.pending.delete(m.seq);
      this.refresh();
      if ('error' in m) p.reject(rebuild(m.error));
      else p.resolve(m);
    });
    const end = (why: Error) => {
      if (this.worker !== w) return;
      this.worker = undefined;
      this.epoch++;
      this.live = 0;
      rmSync(dumpPath, { force: true });
      if (this.dumpPath === dumpPath) this.dumpPath = undefined;
      const pending = [...this.pending.values()];
      this.pending.clear();
      for (const p of pending) p.reject(why);
      this.refresh();
    };
    w.on('error', (e) => end(e instanceof Error ? e : new Error(String(e))));
    w.on('exit', (code) => end(new Error(`the profiling worker ended (exit code ${code})`)));
    cleanupAtExit(this);
    return w;
  }

  /** Ref the worker while answers are awaited; end it after idleMs with nothing to do. */
  private refresh(): void {
    if (this.idle) {
      clearTimeout(this.idle);
      this.idle = undefined;
    }
    const w = this.worker;
    if (!w) return;
    if (this.pending.size > 0) {
      w.ref();
      return;
    }
    w.unref();
    if (this.live <= 0) {
      this.idle = setTimeout(() => void w.terminate(), this.idleMs);
      this.idle.unref();
    }
  }

  /** Ends the worker now (tests, shutdown). */
  async terminate(): Promise<void> {
    const w = this.worker;
    if (w) await w.terminate();
  }

  removeDumpFile(): void {
    if (this.dumpPath) rmSync(this.dumpPath, { force: true });
  }
}

let exitHooked = false;
function cleanupAtExit(w: ProfilingWorker): void {
  if (exitHooked) return;
  exitHooked = true;
  process.once('exit', () => w.removeDumpFile());
}

/** What a `gc` request came to. */
export type GcOutcome = 'ran' | 'unavailable' | 'not-requested' | 'joined';

function runGc(): GcOutcome {
  const gc = (globalThis as { gc?: unknown }).gc;
  if (typeof gc !== 'function') return 'unavailable';
  (gc as () => void)();
  return 'ran';
}

interface State {
  readonly ready: Promise<{ id: number; timeNs: bigint; samples: number }>;
  readonly epoch: number;
  readonly gc: GcOutcome;
  refs: number;
  settled?: { id: number; timeNs: bigint; samples: number };
  readonly renders: Map<string, Promise<Uint8Array>>;
}

/** A hold on one snapshot; release it when done (renders stay valid). */
export class Lease {
  private released = false;
  constructor(
    private readonly source: SnapshotSource,
    /** @internal */ readonly state: State,
    /** What this lease's gc request came to. */
    readonly gc: GcOutcome,
  ) {}

  /** The snapshot's id within this process's profiling worker. */
  get id(): number {
    return this.state.settled!.id;
  }

  /** When the snapshot was taken (ns since the epoch). */
  get timeNs(): bigint {
    return this.state.settled!.timeNs;
  }

  /** The snapshot as bytes (computed once per spec and shared). */
  render(spec: RenderSpec): Promise<Uint8Array> {
    return this.source.cached(this.state, `r|${JSON.stringify(spec)}`, () => ({ op: 'render', id: this.id, spec }));
  }

  /** This snapshot minus `base` (Go's `?seconds=N` delta). */
  delta(base: Lease, spec: RenderSpec): Promise<Uint8Array> {
    if (base.state.epoch !== this.state.epoch) return Promise.reject(new Error('the profiling worker restarted during the window'));
    return this.source.cached(this.state, `d|${base.id}|${JSON.stringify(spec)}`, () => ({ op: 'delta', baseId: base.id, id: this.id, spec }));
  }

  /** The push window ending with this snapshot (see engine.renderWindow). */
  window(base: Lease | undefined, fromNs: bigint, untilNs: bigint): Promise<Uint8Array> {
    const baseId = base && base.state.epoch === this.state.epoch ? base.id : undefined;
    return this.source.cached(this.state, `w|${baseId}|${fromNs}|${untilNs}`, () => ({
      op: 'window',
      ...(baseId !== undefined ? { baseId } : {}),
      id: this.id,
      fromNs,
      untilNs,
    }));
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.source.unref(this.state);
  }
}

/** The coalescing snapshot service (one per process: `snapshots`). */
export class SnapshotSource {
  private readonly worker = new ProfilingWorker();
  private inflight: State | undefined;
  /** Peak snapshots (mi_prof_dump_peak) coalesce among themselves. */
  private inflightPeak: State | undefined;
  /** Dumps taken so far (observability, tests). */
  dumps = 0;
  /**
   * Whether the profiling worker's own allocations are sampled (default false: its memory is
   * the profiler's, not the application's; profiler.start({ includeProfilerThreads })).
   */
  includeProfilerThreads = false;

  /**
   * A lease on a fresh snapshot: a new dump, or the one under way. `gc`: run V8's gc first
   * when it is exposed (--expose-gc); a request that joins a dump under way does not.
   */
  acquire(options: { gc?: boolean; peak?: boolean } = {}): Promise<Lease> {
    requireAddon(); // the typed error, before any worker is started
    const peak = options.peak === true;
    let state = peak ? this.inflightPeak : this.inflight;
    let gc: GcOutcome;
    if (state) {
      gc = !options.gc ? 'not-requested' : typeof (globalThis as { gc?: unknown }).gc === 'function' ? 'joined' : 'unavailable';
    } else {
      gc = options.gc ? runGc() : 'not-requested';
      // the JavaScript heap and the resident set are of now: a peak snapshot goes without them
      const jsHeap = peak ? undefined : takeJsHeap();
      // the application's heap figures from its own thread; the worker measures the rest
      const v8Heap = peak ? undefined : v8HeapFigures();
      const codeLog = ensureCodeLog();
      const ready = this.worker.call(
        { op: 'snapshot', ...(jsHeap ? { jsHeap } : {}), ...(v8Heap ? { v8Heap } : {}), ...(peak ? { peak } : {}), ...(codeLog ? { codeLog } : {}), excludeSelf: !this.includeProfilerThreads },
        [],
        !this.includeProfilerThreads,
      ).then((r) => r as { id: number; timeNs: bigint; samples: number });
      const s: State = { ready, epoch: this.worker.epoch, gc, refs: 0, renders: new Map() };
      this.worker.live++;
      this.dumps++;
      state = s;
      if (peak) this.inflightPeak = s;
      else this.inflight = s;
      const settle = () => {
        if (this.inflight === s) this.inflight = undefined;
        if (this.inflightPeak === s) this.inflightPeak = undefined;
      };
      ready.then(
        (r) => {
          s.settled = r;
          settle();
          if (s.refs === 0) this.free(s);
        },
        () => {
          if (s.epoch === this.worker.epoch) this.worker.live--;
          this.worker.release([], s.epoch); // re-arms the idle timer
          settle();
        },
      );
    }
    state.refs++;
    const st = state;
    return st.ready.then(
      () => new Lease(this, st, gc),
      (e: unknown) => {
        st.refs--;
        throw e;
      },
    );
  }

  /** @internal */
  cached(state: State, key: string, request: () => Request): Promise<Uint8Array> {
    let p = state.renders.get(key);
    if (!p) {
      p = this.worker.call(request()).then((r) => (r as { data: Uint8Array }).data);
      state.renders.set(key, p);
      p.catch(() => state.renders.delete(key));
    }
    return p;
  }

  /** @internal */
  unref(state: State): void {
    state.refs--;
    if (state.refs === 0 && state.settled) this.free(state);
  }

  private free(state: State): void {
    state.renders.clear();
    this.worker.release([state.settled!.id], state.epoch);
  }

  /** Ends the profiling worker (it restarts on next use). */
  terminate(): Promise<void> {
    return this.worker.terminate();
  }
}

/** The process's one snapshot service. */
export const snapshots = new SnapshotSource();
