/**
 * The kind of thread a sample was allocated on, from the names on its stack. Much of a Node
 * process's native memory is allocated off the main thread (async zlib, crypto and fs on
 * libuv's pool, V8's compiler and GC on platform workers), where no JavaScript frame exists.
 */
export type ThreadKind = 'main' | 'libuv threadpool' | 'V8 platform worker' | 'worker_threads' | 'inspector';

const RULES: ReadonlyArray<readonly [RegExp, ThreadKind]> = [
  [/^node::worker::Worker::StartThread/, 'worker_threads'],
  [/PlatformWorkerThread|WorkerThreadsTaskRunner|DelayedTaskScheduler/, 'V8 platform worker'],
  [/^(worker|uv__threadpool\w*|uv__work_\w+)$/, 'libuv threadpool'],
  [/^node::inspector::/, 'inspector'],
];

/** Returns the thread kind, or undefined when the stack does not tell (e.g. cut short). */
export function classifyThread(names: readonly string[], tid: number, pid: number | undefined): ThreadKind | undefined {
  if (pid !== undefined && tid === pid) return 'main';
  // Above "[queued by]" is the stack of another thread, the one that queued the work.
  const queued = names.indexOf('[queued by]');
  if (queued >= 0) names = names.slice(0, queued);
  // Roots last: the outermost matching frame decides (a worker thread's stack also runs
  // code that the main thread runs).
  for (let i = names.length - 1; i >= 0; i--) {
    const name = names[i]!;
    for (const [re, kind] of RULES) if (re.test(name)) return kind;
  }
  return undefined;
}
