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
  | 'MPP_ERR_FILE';

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
