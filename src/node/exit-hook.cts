/**
 * Loaded with `--require` into every Node process that `mimalloc-pprof run` starts.
 *
 * Node frees most of its native memory during its own teardown, before the preload
 * library's at-exit dump runs, so an at-exit profile of a Node process shows almost nothing.
 * This hook takes the profile when the program is done but before that teardown: on the
 * process's 'exit' event, and on SIGINT/SIGTERM when the program has no handler of its own
 * (then the signal is raised again, so the process still ends the way it would have). It
 * then stops the profiler, which also cancels the library's at-exit dump.
 */
import { join } from 'node:path';
import { isMainThread } from 'node:worker_threads';

interface Addon {
  available(): { available: boolean; reason?: string };
  dump(path: string, format: 'proto' | 'text'): void;
  stop(): void;
}

const dir = process.env.MIMALLOC_PPROF_RUN_DIR;
const addonPath = process.env.MIMALLOC_PPROF_ADDON;

function install(addon: Addon, runDir: string): void {
  let done = false;
  const dump = () => {
    if (done) return;
    done = true;
    try {
      addon.dump(join(runDir, `raw.${process.pid}.pb`), 'proto');
      addon.stop();
    } catch (e) {
      process.stderr.write(`mimalloc-pprof: ${(e as Error).message}\n`);
    }
  };
  process.on('exit', dump);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    const onSignal = () => {
      if (process.listenerCount(signal) > 1) return; // the program handles it and exits its own way
      dump();
      process.removeListener(signal, onSignal);
      process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

if (isMainThread && dir && addonPath) {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const addon = require(addonPath) as Addon;
  if (addon.available().available) install(addon, dir);
}
