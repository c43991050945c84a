/**
 * Text scanning for the heap text codec: a bounded line reader and the ASCII character
 * classes and skips used by the hand-written matchers (no backtracking regex on input).
 * Lines are latin1 strings (one char per byte), so byte-oriented patterns stay exact.
 */
import { Buffer } from 'node:buffer';

import { ProfileFormatError } from '../errors.js';

/** bufio.Scanner's token limit: longer lines make pprof fail. */
export const MAX_LINE = 64 * 1024 - 1;

/** The lines of a buffer, one at a time, each at most MAX_LINE bytes. */
export class Lines {
  private pos = 0;
  lineNo = 0;
  private readonly buf: Buffer;
  constructor(
    data: Uint8Array,
    private readonly name: string,
  ) {
    this.buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  }

  /** The next line without its '\n' (and one trailing '\r'), as latin1; null at the end. */
  next(): string | null {
    const b = this.buf;
    if (this.pos >= b.length) return null;
    let nl = b.indexOf(10, this.pos);
    if (nl < 0) nl = b.length;
    this.lineNo++;
    if (nl - this.pos > MAX_LINE) {
      throw new ProfileFormatError(`${this.name}: line ${this.lineNo} is longer than 64 KiB, more than pprof reads`);
    }
    let end = nl;
    if (end > this.pos && b[end - 1] === 13) end--;
    const s = b.toString('latin1', this.pos, end);
    this.pos = nl + 1;
    return s;
  }

  /** The first line, if it fits the line limit (else null: not a text profile). */
  first(): string | null {
    const b = this.buf;
    let nl = b.indexOf(10);
    if (nl < 0) nl = b.length;
    if (nl > MAX_LINE) return null;
    return this.next();
  }
}

export const isDigit = (c: number): boolean => c >= 48 && c <= 57;
export const isLowerHex = (c: number): boolean => isDigit(c) || (c >= 97 && c <= 102);
export const isXDigit = (c: number): boolean => isLowerHex(c) || (c >= 65 && c <= 70);
/** RE2's \s: [\t\n\f\r ]. */
export const isSpace = (c: number): boolean => c === 32 || c === 9 || c === 10 || c === 12 || c === 13;

export function spaces(s: string, i: number): number {
  while (s.charCodeAt(i) === 32) i++;
  return i;
}
export function digits(s: string, i: number): number {
  while (isDigit(s.charCodeAt(i))) i++;
  return i;
}
export function xdigits(s: string, i: number): number {
  while (isXDigit(s.charCodeAt(i))) i++;
  return i;
}
export function ws(s: string, i: number): number {
  while (isSpace(s.charCodeAt(i))) i++;
  return i;
}

/** Go's strings.TrimSpace for ASCII white space. */
export function trim(s: string): string {
  let a = 0;
  let b = s.length;
  const sp = (c: number) => c === 32 || (c >= 9 && c <= 13);
  while (a < b && sp(s.charCodeAt(a))) a++;
  while (b > a && sp(s.charCodeAt(b - 1))) b--;
  return a === 0 && b === s.length ? s : s.slice(a, b);
}

/** A short, single-line excerpt of input for messages. */
export function excerpt(line: string): string {
  const t = line.length > 40 ? `${line.slice(0, 40)}…` : line;
  // input bytes are latin1 here: anything not printable ASCII is shown as \xNN
  return `"${t.replace(/[^\x20-\x7e…]|["\\]/g, (ch) => (ch === '"' || ch === '\\' ? `\\${ch}` : `\\x${ch.charCodeAt(0).toString(16).padStart(2, '0')}`))}"`;
}
