/**
 * parseProfile: the one entry point that decides the format, as google/pprof's ParseData:
 * gunzip when the data starts with 1f 8b (bounded), try profile.proto, then the heap text
 * formats; a parser that does not recognise the input falls through, any other failure
 * stops. The result is validated (validate.ts). Every failure is a ProfileFormatError whose
 * message is one sentence starting with the input's name; nothing else escapes (decoder
 * RangeErrors, allocation failures and the like are converted).
 */
import { gunzipSync } from 'node:zlib';

import { MimallocPprofError, ProfileFormatError } from '../errors.js';
import { parseHeapText } from './heap-text.js';
import type { Profile } from './model.js';
import { decodeProto, DEFAULT_LIMITS, LimitError, type ParseLimits, WireError } from './proto.js';
import { validateProfile } from './validate.js';

/** Options of parseProfile; each bounds what a hostile input can make it allocate. */
export interface ParseOptions {
  /** Most bytes the input may have, or decompress to; default 1 GiB. */
  maxBytes?: number;
  /** Most messages (samples, locations, strings…); default 10 000 000. */
  maxRecords?: number;
  /** Most elements of repeated integer fields (location ids, values…); default 100 000 000. */
  maxScalars?: number;
}

export const DEFAULT_MAX_BYTES = 1 << 30;

const OPTION_KEYS = new Set(['maxBytes', 'maxRecords', 'maxScalars']);

function human(n: number): string {
  return n >= 1 << 30 && n % (1 << 30) === 0 ? `${n / (1 << 30)} GiB` : n >= 1 << 20 && n % (1 << 20) === 0 ? `${n / (1 << 20)} MiB` : `${n} bytes`;
}

function gunzip(data: Uint8Array, name: string, maxBytes: number): Uint8Array {
  try {
    return gunzipSync(data, { maxOutputLength: maxBytes });
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === 'ERR_BUFFER_TOO_LARGE' || e instanceof RangeError) {
      throw new ProfileFormatError(`${name}: decompresses to more than ${human(maxBytes)}, beyond this tool's limit`);
    }
    const why = e instanceof Error ? e.message.split('\n')[0] : String(e);
    throw new ProfileFormatError(`${name}: is gzip data that cannot be decompressed (${why})`);
  }
}

/**
 * Reads a heap profile: profile.proto (gzipped or not) or gperftools heap text (heap_v2 and
 * pprof's other heap headers; gzipped or not). `name` (the file name) starts every error
 * message. Throws ProfileFormatError on any problem.
 */
export function parseProfile(data: Uint8Array, name = 'profile', options: ParseOptions = {}): Profile {
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.has(key)) throw new TypeError(`parseProfile: unknown option '${key}'`);
  }
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
  const limits: ParseLimits = {
    maxRecords: options.maxRecords ?? DEFAULT_LIMITS.maxRecords,
    maxScalars: options.maxScalars ?? DEFAULT_LIMITS.maxScalars,
  };
  try {
    if (data.length > maxBytes) throw new ProfileFormatError(`${name}: is larger than ${human(maxBytes)}, beyond this tool's limit`);
    if (data.length >= 2 && data[0] === 0x1f && data[1] === 0x8b) data = gunzip(data, name, maxBytes);
    if (data.length === 0) throw new ProfileFormatError(`${name}: is empty`);

    let protoProblem: string;
    try {
      const p = decodeProto(data, limits);
      validateProfile(p, name);
      return p;
    } catch (e) {
      if (e instanceof LimitError) throw new ProfileFormatError(`${name}: ${e.message}`);
      if (!(e instanceof WireError)) throw e;
      protoProblem = e.message;
    }

    const text = parseHeapText(data, name, limits);
    if (text.kind === 'profile') {
      validateProfile(text.profile, name);
      return text.profile;
    }
    throw new ProfileFormatError(`${name}: is neither profile.proto (${protoProblem}) nor a heap profile in text (${text.reason})`);
  } catch (e) {
    if (e instanceof ProfileFormatError) throw e;
    if (e instanceof MimallocPprofError) throw new ProfileFormatError(e.message);
    const why = e instanceof Error ? `${e.name}: ${e.message.split('\n')[0]}` : String(e);
    throw new ProfileFormatError(`${name}: cannot be read (${why})`);
  }
}
