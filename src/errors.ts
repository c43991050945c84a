/** Base class of every error this package throws; `code` is stable and documented. */
export class MimallocPprofError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.name = 'MimallocPprofError';
    this.code = code;
  }
}

export type ErrorCode = 'MPP_ERR_LIBRARY_MISSING' | 'MPP_ERR_USAGE';

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
