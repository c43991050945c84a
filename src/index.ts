export { libraryPath, LIBRARY_FILE } from './native/library.js';
export { MimallocPprofError, LibraryMissingError, UsageError } from './errors.js';
export type { ErrorCode } from './errors.js';
