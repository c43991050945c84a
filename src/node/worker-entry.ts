/**
 * The profiling worker's entry: leaves this thread out of profiles (unless asked not to)
 * before the worker's modules load, so their memory is not charged to the application, then
 * loads the worker (worker.ts). Only the addon's small module graph loads first.
 */
import { workerData } from 'node:worker_threads';

import { requireAddon } from './addon.js';

if ((workerData as { excludeSelf?: boolean }).excludeSelf !== false) {
  try {
    requireAddon().excludeThread(true);
  } catch {
    // no preload: every request answers with that error anyway
  }
}
await import('./worker.js');
