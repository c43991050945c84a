/** Profile files on disk: read with errors that name the file, written atomically. */
import { readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';

import { FileAccessError } from '../errors.js';
import type { Profile } from './model.js';
import { DEFAULT_MAX_BYTES, parseProfile } from './parse.js';

/** A file error in a few words. */
function reason(e: unknown): string {
  const code = (e as { code?: string }).code;
  switch (code) {
    case 'ENOENT':
      return 'no such file or directory';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'it is a directory';
    case 'ENOTDIR':
      return 'a component of the path is not a directory';
    default:
      return e instanceof Error ? e.message.split('\n')[0]! : String(e);
  }
}

/** Reads and parses a profile file (any supported format); errors name the file. */
export function readProfileFile(path: string): Profile {
  let data: Buffer;
  try {
    const st = statSync(path);
    if (st.isDirectory()) throw Object.assign(new Error('directory'), { code: 'EISDIR' });
    if (st.size > DEFAULT_MAX_BYTES) throw new FileAccessError(`cannot read ${path}: it is larger than 1 GiB`);
    data = readFileSync(path);
  } catch (e) {
    if (e instanceof FileAccessError) throw e;
    throw new FileAccessError(`cannot read ${path}: ${reason(e)}`);
  }
  return parseProfile(data, path);
}

/** Writes a file atomically (temporary file + rename); errors name the file. */
export function writeFileAtomic(path: string, data: Uint8Array | string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw new FileAccessError(`cannot write ${path}: ${reason(e)}`);
  }
}

