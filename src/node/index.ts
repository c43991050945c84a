/** The in-process API: profiler, memory events, dumps to a directory. Re-exports only. */
export { profiler, memoryEvents, type StartOptions, type ProfileOptions, type ProfilerStats, type MemoryEventsSnapshot, type SampleType } from './profiler.js';
export type { Availability, NativeWindow as MemoryWindow } from './addon.js';
export { startDumps, configureFromEnv, dumpOptionsFromEnv, DUMP_SIGNALS, type DumpOptions, type Dumps } from './dumps.js';
export type { Logger } from './failure-window.js';
