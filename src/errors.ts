/** Base class of every error this package throws; `code` is stable and documented. */
export class MimallocPprofError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.name = 'MimallocPprofError';
    this.code = code;
  }
}

export type ErrorCode =
  | 'MPP_ERR_LIBRARY_MISSING'
  | 'MPP_ERR_USAGE'
  | 'MPP_ERR_PROFILE_FORMAT'
  | 'MPP_ERR_PROFILE_MISMATCH'
  | 'MPP_ERR_FILE'
  | 'MPP_ERR_NOT_PRELOADED'
  | 'MPP_ERR_VERSION'
  | 'MPP_ERR_PROFILER';

/** The preload library was not found where it should be. */
export class LibraryMissingError extends MimallocPprofError {
  constructor(message: string) {
    super('MPP_ERR_LIBRARY_MISSING', message);
    this.name = 'LibraryMissingError';
  }
}

/** The command line was not understood. */
export class UsageError extends MimallocPprofError {
  constructor(message: string) {
    super('MPP_ERR_USAGE', message);
    this.name = 'UsageError';
  }
}

/**
 * A profile could not be read (not a profile, truncated, malformed, over a size limit) or
 * cannot be written in the requested format. The message is one sentence that starts with
 * the file's name.
 */
export class ProfileFormatError extends MimallocPprofError {
  constructor(message: string) {
    super('MPP_ERR_PROFILE_FORMAT', message);
    this.name = 'ProfileFormatError';
  }
}

/** Two profiles cannot be combined (no common sample type, different sample types). */
export class ProfileMismatchError extends MimallocPprofError {
  constructor(message: string) {
    super('MPP_ERR_PROFILE_MISMATCH', message);
    this.name = 'ProfileMismatchError';
  }
}

/** A file named on the command line could not be read or written. */
export class FileAccessError extends MimallocPprofError {
  constructor(message: string) {
    super('MPP_ERR_FILE', message);
    this.name = 'FileAccessError';
  }
}

/**
 * The in-process profiler cannot be reached: the process does not run under the preload
 * library (`LD_PRELOAD`), or the Node addon that reaches it is not built. Every call of the
 * in-process API (`profiler.*`, dumps, push) throws or rejects with it; nothing else happens.
 */
export class NotPreloadedError extends MimallocPprofError {
  constructor(message: string) {
    super('MPP_ERR_NOT_PRELOADED', message);
    this.name = 'NotPreloadedError';
  }
}

/** The preload library in this process speaks another version of the C API than the addon. */
export class LibraryVersionError extends MimallocPprofError {
  constructor(message: string) {
    super('MPP_ERR_VERSION', message);
    this.name = 'LibraryVersionError';
  }
}

/** The preload library refused an operation (start failed, a dump could not be written). */
export class ProfilerError extends MimallocPprofError {
  constructor(message: string) {
    super('MPP_ERR_PROFILER', message);
    this.name = 'ProfilerError';
  }
}
