export { libraryPath, LIBRARY_FILE } from './preload/library.js';
export {
  MimallocPprofError,
  LibraryMissingError,
  UsageError,
  ProfileFormatError,
  ProfileMismatchError,
  FileAccessError,
  NotPreloadedError,
  LibraryVersionError,
  ProfilerError,
} from './errors.js';
export type { ErrorCode } from './errors.js';
export {
  parseProfile,
  readProfile,
  DEFAULT_MAX_BYTES,
  encodeProfile,
  encodeHeapText,
  parseHeapText,
  unsampleHeapPair,
  validateProfile,
  scale,
  merge,
  diff,
  growth,
  growthSeries,
  top,
  totalValue,
  findSampleType,
  frameNames,
  indexProfile,
  sampleTypeNames,
  str,
  Profile,
} from './profile/index.js';
export type { ChainRow, GrowthRow, GrowthResult, ProcessGrowth, SeriesProfile, ParseOptions, ReadOptions, EncodeOptions, TopRow, Numeric, ProfileIndex, ParseResult } from './profile/index.js';
export {
  profiler,
  memoryEvents,
  startDumps,
  configureFromEnv,
  dumpOptionsFromEnv,
  DUMP_SIGNALS,
} from './node/index.js';
export type {
  StartOptions,
  ProfileOptions,
  ProfilerStats,
  MemoryEventsSnapshot,
  MemoryWindow,
  SampleType,
  Availability,
  DumpOptions,
  Dumps,
  Logger,
} from './node/index.js';
export { pprofHandler, serve } from './http/index.js';
export type { PprofHandler, PprofHandlerOptions, NextFunction, ServeOptions, PprofServer } from './http/index.js';
export { pushTo, seriesName, SAMPLE_TYPE_CONFIG } from './push/index.js';
export type { PushOptions, Pusher, PushStats, PushResult, SettleOptions } from './push/index.js';
export { runProgram } from './run/index.js';
export type { RunOptions, RunResult, ProcessReport } from './run/index.js';
export { nameRawProfile } from './symbolize/raw.js';
export type { NamingReport } from './symbolize/raw.js';
