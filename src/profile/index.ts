/** The profile layer: model, codecs, one parse entry point, operations. Re-exports only. */
export { parseProfile, DEFAULT_MAX_BYTES, type ParseOptions } from './parse.js';
export { encodeProfile, type EncodeOptions } from './proto.js';
export { encodeHeapText, parseHeapText, unsampleHeapPair } from './heap-text.js';
export { validateProfile } from './validate.js';
export { readProfile, type ReadOptions } from './files.js';
export { scale } from './scale.js';
export { merge } from './merge.js';
export { diff } from './diff.js';
export { growth, growthSeries, groupByProcess, processInfo, type ChainRow, type GrowthRow, type GrowthResult, type ProcessGrowth, type ProcessInfo, type SeriesProfile } from './growth.js';
export { top, totalValue, type TopRow } from './top.js';
export { findSampleType, frameNames, indexProfile, sampleTypeNames, str, type Numeric, type ProfileIndex } from './model.js';
export type { ParseResult } from './proto.js';
export { Profile } from './pprof.js';
