/**
 * The profile.proto codec. Encoding is pprof-format's (`Profile.encode`), gzipped for the
 * on-disk form. Decoding is a strict, bounded wire reader of our own that builds
 * pprof-format objects, because pprof-format's decoder accepts truncated input silently
 * (it clamps lengths), misreads multi-byte tags, returns uint64 for negative int64 and
 * allocates without bound.
 *
 * The reader's rules:
 *  - no recursion beyond the schema's fixed depth (Profile → Sample → Label, Location →
 *    Line); every loop advances by at least one byte;
 *  - varints are at most 10 bytes and fit 64 bits; lengths must fit what remains;
 *  - a known field must have its schema's wire type (repeated scalars: packed or not);
 *    unknown fields are skipped (wire types 0, 1, 2, 5; groups are rejected);
 *  - records (messages) and repeated scalars are counted against limits (ParseOptions),
 *    so a small input cannot make a huge object graph;
 *  - results are canonical Numerics (model.ts): int64 fields signed, uint64 unsigned.
 * A wire-level failure is "not profile.proto" (parseProfile then tries the text formats);
 * validation failures of a well-formed message are reported as they are.
 */
import { gzipSync } from 'node:zlib';

import { emptyTableToken, Function as PFunction, Label, Line, Location, Mapping, Profile, Sample, StringTable, ValueType } from './pprof.js';

import { canon, type Numeric } from './model.js';
import { validateProfile } from './validate.js';

/** Size limits on what a parser builds; defaults suit any real heap profile. */
export interface ParseLimits {
  /** Most messages (samples, locations, lines, labels, functions, mappings, strings). */
  maxRecords: number;
  /** Most scalar elements of repeated fields (location ids, values, comments, addresses). */
  maxScalars: number;
}

export const DEFAULT_LIMITS: ParseLimits = { maxRecords: 10_000_000, maxScalars: 100_000_000 };

/** What a format parser answers: a profile, or that the input is not in its format. */
export type ParseResult = { kind: 'profile'; profile: Profile } | { kind: 'unrecognised'; reason: string };

/** A wire-format violation; parseProfile turns it into "not profile.proto (...)". */
export class WireError extends Error {}

/** A limit was exceeded; reported as such (not as "unrecognised"). */
export class LimitError extends Error {}

interface Cursor {
  b: Uint8Array;
  pos: number;
  records: number;
  scalars: number;
  limits: ParseLimits;
}

const WIRE_VARINT = 0;
const WIRE_I64 = 1;
const WIRE_LEN = 2;
const WIRE_I32 = 5;

function truncated(c: Cursor, what: string): never {
  throw new WireError(`${what} is cut short at byte ${c.pos} of ${c.b.length}`);
}

/** An unsigned varint ending before `end`: a number below 2^49, else a canonical bigint. */
function varint(c: Cursor, end: number, what: string): Numeric {
  const b = c.b;
  let pos = c.pos;
  let x = 0;
  let mul = 1;
  for (let i = 0; i < 7; i++) {
    if (pos >= end) truncated(c, what);
    const byte = b[pos++]!;
    x += (byte & 0x7f) * mul;
    if (byte < 0x80) {
      c.pos = pos;
      return x;
    }
    mul *= 128;
  }
  let big = BigInt(x);
  let shift = 49n;
  for (let i = 7; i < 10; i++) {
    if (pos >= end) truncated(c, what);
    const byte = b[pos++]!;
    if (i === 9 && byte > 1) {
      c.pos = pos;
      throw new WireError(`${what} has a varint over 64 bits at byte ${pos - 1}`);
    }
    big |= BigInt(byte & 0x7f) << shift;
    shift += 7n;
    if (byte < 0x80) {
      c.pos = pos;
      return canon(big);
    }
  }
  throw new WireError(`${what} has a varint longer than 10 bytes at byte ${pos}`);
}

/** The same varint read as a signed int64 (two's complement). */
function svarint(c: Cursor, end: number, what: string): Numeric {
  const v = varint(c, end, what);
  return typeof v === 'bigint' ? canon(BigInt.asIntN(64, v)) : v;
}

function lengthOf(c: Cursor, end: number, what: string): number {
  const n = varint(c, end, what);
  if (typeof n === 'bigint' || n > end - c.pos) {
    throw new WireError(`${what} claims ${String(n)} bytes at byte ${c.pos} but only ${end - c.pos} remain`);
  }
  return n;
}

function record(c: Cursor): void {
  if (++c.records > c.limits.maxRecords) {
    throw new LimitError(`has more than ${c.limits.maxRecords} records (samples, locations, strings…), beyond this tool's limit`);
  }
}

function scalar(c: Cursor, n = 1): void {
  c.scalars += n;
  if (c.scalars > c.limits.maxScalars) {
    throw new LimitError(`has more than ${c.limits.maxScalars} repeated values, beyond this tool's limit`);
  }
}

/** Reads a tag; returns [field, wire type]. */
function tag(c: Cursor, end: number, what: string): [number, number] {
  const at = c.pos;
  const t = varint(c, end, what);
  if (typeof t === 'bigint' || t > 0xffffffff) throw new WireError(`${what} has an invalid tag at byte ${at}`);
  const field = Math.floor(t / 8);
  const wire = t % 8;
  if (field === 0) throw new WireError(`${what} has field number 0 at byte ${at}`);
  return [field, wire];
}

function skip(c: Cursor, end: number, wire: number, what: string): void {
  switch (wire) {
    case WIRE_VARINT:
      varint(c, end, what);
      return;
    case WIRE_I64:
      if (end - c.pos < 8) truncated(c, what);
      c.pos += 8;
      return;
    case WIRE_LEN:
      c.pos += lengthOf(c, end, what);
      return;
    case WIRE_I32:
      if (end - c.pos < 4) truncated(c, what);
      c.pos += 4;
      return;
    default:
      throw new WireError(`${what} has unsupported wire type ${wire} at byte ${c.pos}`);
  }
}

function expect(wire: number, want: number, field: number, what: string, c: Cursor): void {
  if (wire !== want) throw new WireError(`${what} has field ${field} with wire type ${wire} instead of ${want} before byte ${c.pos}`);
}

/** Appends one or more (packed) varints of a repeated scalar field. */
function repeated(c: Cursor, end: number, wire: number, out: Numeric[], signed: boolean, what: string): void {
  if (wire === WIRE_VARINT) {
    scalar(c);
    out.push(signed ? svarint(c, end, what) : varint(c, end, what));
    return;
  }
  if (wire !== WIRE_LEN) throw new WireError(`${what} has a repeated integer with wire type ${wire} before byte ${c.pos}`);
  const len = lengthOf(c, end, what);
  const stop = c.pos + len;
  while (c.pos < stop) {
    scalar(c);
    out.push(signed ? svarint(c, stop, what) : varint(c, stop, what));
  }
}

type Decoder<T> = (c: Cursor, end: number) => T;

function message<T>(c: Cursor, end: number, wire: number, field: number, what: string, decode: Decoder<T>): T {
  expect(wire, WIRE_LEN, field, what, c);
  const len = lengthOf(c, end, what);
  record(c);
  const stop = c.pos + len;
  const v = decode(c, stop);
  c.pos = stop;
  return v;
}

/** A scalar field: varint (optionally signed) with the right wire type. */
function int(c: Cursor, end: number, wire: number, field: number, what: string, signed: boolean): Numeric {
  expect(wire, WIRE_VARINT, field, what, c);
  return signed ? svarint(c, end, what) : varint(c, end, what);
}

const decodeValueType: Decoder<ValueType> = (c, end) => {
  const d = { type: 0 as Numeric, unit: 0 as Numeric };
  while (c.pos < end) {
    const [f, w] = tag(c, end, 'a value type');
    if (f === 1) d.type = int(c, end, w, f, 'a value type', true);
    else if (f === 2) d.unit = int(c, end, w, f, 'a value type', true);
    else skip(c, end, w, 'a value type');
  }
  return new ValueType(d);
};

const decodeLabel: Decoder<Label> = (c, end) => {
  const d = { key: 0 as Numeric, str: 0 as Numeric, num: 0 as Numeric, numUnit: 0 as Numeric };
  while (c.pos < end) {
    const [f, w] = tag(c, end, 'a label');
    if (f === 1) d.key = int(c, end, w, f, 'a label', true);
    else if (f === 2) d.str = int(c, end, w, f, 'a label', true);
    else if (f === 3) d.num = int(c, end, w, f, 'a label', true);
    else if (f === 4) d.numUnit = int(c, end, w, f, 'a label', true);
    else skip(c, end, w, 'a label');
  }
  return new Label(d);
};

const decodeSample: Decoder<Sample> = (c, end) => {
  const locationId: Numeric[] = [];
  const value: Numeric[] = [];
  const label: Label[] = [];
  while (c.pos < end) {
    const [f, w] = tag(c, end, 'a sample');
    if (f === 1) repeated(c, end, w, locationId, false, 'a sample');
    else if (f === 2) repeated(c, end, w, value, true, 'a sample');
    else if (f === 3) label.push(message(c, end, w, f, 'a sample', decodeLabel));
    else skip(c, end, w, 'a sample');
  }
  return new Sample({ locationId, value, label });
};

const decodeMapping: Decoder<Mapping> = (c, end) => {
  const d = {
    id: 0 as Numeric,
    memoryStart: 0 as Numeric,
    memoryLimit: 0 as Numeric,
    fileOffset: 0 as Numeric,
    filename: 0 as Numeric,
    buildId: 0 as Numeric,
    hasFunctions: false,
    hasFilenames: false,
    hasLineNumbers: false,
    hasInlineFrames: false,
  };
  const w_ = 'a mapping';
  while (c.pos < end) {
    const [f, w] = tag(c, end, w_);
    switch (f) {
      case 1: d.id = int(c, end, w, f, w_, false); break;
      case 2: d.memoryStart = int(c, end, w, f, w_, false); break;
      case 3: d.memoryLimit = int(c, end, w, f, w_, false); break;
      case 4: d.fileOffset = int(c, end, w, f, w_, false); break;
      case 5: d.filename = int(c, end, w, f, w_, true); break;
      case 6: d.buildId = int(c, end, w, f, w_, true); break;
      case 7: d.hasFunctions = int(c, end, w, f, w_, false) !== 0; break;
      case 8: d.hasFilenames = int(c, end, w, f, w_, false) !== 0; break;
      case 9: d.hasLineNumbers = int(c, end, w, f, w_, false) !== 0; break;
      case 10: d.hasInlineFrames = int(c, end, w, f, w_, false) !== 0; break;
      default: skip(c, end, w, w_);
    }
  }
  return new Mapping(d);
};

const decodeLine: Decoder<Line> = (c, end) => {
  const d = { functionId: 0 as Numeric, line: 0 as Numeric, column: 0 as Numeric };
  while (c.pos < end) {
    const [f, w] = tag(c, end, 'a line');
    if (f === 1) d.functionId = int(c, end, w, f, 'a line', false);
    else if (f === 2) d.line = int(c, end, w, f, 'a line', true);
    else if (f === 3) d.column = int(c, end, w, f, 'a line', true);
    else skip(c, end, w, 'a line');
  }
  return new Line(d);
};

const decodeLocation: Decoder<Location> = (c, end) => {
  const d = { id: 0 as Numeric, mappingId: 0 as Numeric, address: 0 as Numeric, line: [] as Line[], isFolded: false };
  while (c.pos < end) {
    const [f, w] = tag(c, end, 'a location');
    if (f === 1) d.id = int(c, end, w, f, 'a location', false);
    else if (f === 2) d.mappingId = int(c, end, w, f, 'a location', false);
    else if (f === 3) d.address = int(c, end, w, f, 'a location', false);
    else if (f === 4) d.line.push(message(c, end, w, f, 'a location', decodeLine));
    else if (f === 5) d.isFolded = int(c, end, w, f, 'a location', false) !== 0;
    else skip(c, end, w, 'a location');
  }
  return new Location(d);
};

const decodeFunction: Decoder<PFunction> = (c, end) => {
  const d = { id: 0 as Numeric, name: 0 as Numeric, systemName: 0 as Numeric, filename: 0 as Numeric, startLine: 0 as Numeric };
  while (c.pos < end) {
    const [f, w] = tag(c, end, 'a function');
    if (f === 1) d.id = int(c, end, w, f, 'a function', false);
    else if (f === 2) d.name = int(c, end, w, f, 'a function', true);
    else if (f === 3) d.systemName = int(c, end, w, f, 'a function', true);
    else if (f === 4) d.filename = int(c, end, w, f, 'a function', true);
    else if (f === 5) d.startLine = int(c, end, w, f, 'a function', true);
    else skip(c, end, w, 'a function');
  }
  return new PFunction(d);
};

/**
 * Decodes a profile.proto message. Throws WireError when the bytes are not a well-formed
 * message of this schema, LimitError over a limit; the result is not yet validated.
 */
export function decodeProto(data: Uint8Array, limits: ParseLimits = DEFAULT_LIMITS): Profile {
  const c: Cursor = { b: data, pos: 0, records: 0, scalars: 0, limits };
  const end = data.length;
  const sampleType: ValueType[] = [];
  const sample: Sample[] = [];
  const mapping: Mapping[] = [];
  const location: Location[] = [];
  const func: PFunction[] = [];
  const comment: Numeric[] = [];
  const strings = new StringTable(emptyTableToken);
  let nstrings = 0;
  let periodType: ValueType | undefined;
  const h = { dropFrames: 0 as Numeric, keepFrames: 0 as Numeric, timeNanos: 0 as Numeric, durationNanos: 0 as Numeric, period: 0 as Numeric, defaultSampleType: 0 as Numeric, docUrl: 0 as Numeric };
  const what = 'the profile';
  while (c.pos < end) {
    const [f, w] = tag(c, end, what);
    switch (f) {
      case 1: sampleType.push(message(c, end, w, f, what, decodeValueType)); break;
      case 2: sample.push(message(c, end, w, f, what, decodeSample)); break;
      case 3: mapping.push(message(c, end, w, f, what, decodeMapping)); break;
      case 4: location.push(message(c, end, w, f, what, decodeLocation)); break;
      case 5: func.push(message(c, end, w, f, what, decodeFunction)); break;
      case 6: {
        expect(w, WIRE_LEN, f, what, c);
        const len = lengthOf(c, end, 'a string');
        record(c);
        strings._decodeString(data.subarray(c.pos, c.pos + len));
        nstrings++;
        c.pos += len;
        break;
      }
      case 7: h.dropFrames = int(c, end, w, f, what, true); break;
      case 8: h.keepFrames = int(c, end, w, f, what, true); break;
      case 9: h.timeNanos = int(c, end, w, f, what, true); break;
      case 10: h.durationNanos = int(c, end, w, f, what, true); break;
      case 11: periodType = message(c, end, w, f, what, decodeValueType); break;
      case 12: h.period = int(c, end, w, f, what, true); break;
      case 13: repeated(c, end, w, comment, true, what); break;
      case 14: h.defaultSampleType = int(c, end, w, f, what, true); break;
      case 15: h.docUrl = int(c, end, w, f, what, true); break;
      default: skip(c, end, w, what);
    }
  }
  void nstrings;
  return new Profile({ sampleType, sample, mapping, location, function: func, stringTable: strings, comment, ...h, ...(periodType ? { periodType } : {}) });
}

/** Options of encodeProfile. */
export interface EncodeOptions {
  /** gzip the message (the standard on-disk form, `.pb.gz`); default true. */
  gzip?: boolean;
}

/**
 * encodeProfile: the profile as profile.proto bytes, gzipped unless `gzip: false`. The
 * profile is validated first (ProfileFormatError names the problem).
 */
export function encodeProfile(p: Profile, options: EncodeOptions = {}): Uint8Array {
  for (const key of Object.keys(options)) {
    if (key !== 'gzip') throw new TypeError(`encodeProfile: unknown option '${key}'`);
  }
  validateProfile(p);
  const raw = p.encode();
  return options.gzip === false ? raw : new Uint8Array(gzipSync(raw));
}
