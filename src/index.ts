export { libraryPath, LIBRARY_FILE } from './native/library.js';
export {
  MimallocPprofError,
  LibraryMissingError,
  UsageError,
  ProfileFormatError,
  ProfileMismatchError,
  FileAccessError,
} from './errors.js';
export type { ErrorCode } from './errors.js';
export {
  parseProfile,
  DEFAULT_MAX_BYTES,
  encodeProfile,
  encodeHeapText,
  parseHeapText,
  unsampleHeapPair,
  validateProfile,
  scale,
  merge,
  diff,
  top,
  totalValue,
  findSampleType,
  frameNames,
  indexProfile,
  sampleTypeNames,
  str,
  Profile,
} from './profile/index.js';
export type { ParseOptions, EncodeOptions, TopRow, Numeric, ProfileIndex, ParseResult } from './profile/index.js';
