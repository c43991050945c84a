/**
 * Zero-code set-up from the environment, for `node --import <this file>` (or NODE_OPTIONS):
 * starts the dumps that MIMALLOC_PPROF_DUMP_* ask for (see dumps.ts). Only in the main
 * thread; a problem is one line on stderr and the application runs on.
 */
import { isMainThread } from 'node:worker_threads';

import { ensureCodeLog } from './code-log.js';
import { configureFromEnv } from './dumps.js';

if (isMainThread) {
  try {
    ensureCodeLog(); // before the application's code is optimised: its inlined functions named
    configureFromEnv();
  } catch (e) {
    process.stderr.write(`mimalloc-pprof: dumps not started: ${e instanceof Error ? e.message : String(e)}\n`);
  }
}
