/**
 * The memory-map section of legacy text profiles, read as google/pprof reads it
 * (legacy_profile.go parseMappingEntry; profile.go massageMappings; remapMappingIDs):
 *  - /proc/self/maps lines (`start-end perms offset maj:min inode file`) and pprof's brief
 *    lines (`start-end [perms] [file] [(@offset)] [buildid]`), after a glog prefix is
 *    removed; entries whose perms lack `x` are skipped; unrecognised lines are ignored
 *    (`key=value` substitutions are not supported); tokens are whitespace-separated, which
 *    equals pprof's patterns on well-formed lines;
 *  - adjacent entries of one file merge; the main binary (first non-.so, non-[…] file) goes
 *    first; a leading /anon_hugepage is dropped; the 0x400000 rule; each address goes to the
 *    first mapping containing it, else a mapping whose offset reaches back over it is
 *    extended, else a fake [0, 2^64) mapping is added.
 * Address lookups use a sorted index when mappings do not overlap (the normal case); with
 * overlaps, a linear scan under a work budget, so hostile maps cannot make it quadratic.
 */
import { Buffer } from 'node:buffer';

import { ProfileFormatError } from '../errors.js';
import { isZero, type Numeric, toBig, U64_MAX } from './model.js';
import { isDigit, isSpace, isXDigit, trim, ws, xdigits } from './text-scan.js';

export interface TextMapping {
  start: bigint;
  limit: bigint;
  offset: bigint;
  file: string;
  buildId: string;
}

/** glog's `file:line] ` prefix (logInfoRE), removed. */
export function removeLoggingInfo(line: string): string {
  let j = 0;
  while (j < line.length && line[j] !== '[' && line[j] !== ']') j++;
  if (line[j] !== ']' || !isSpace(line.charCodeAt(j + 1))) return line;
  let d = j;
  while (d > 0 && isDigit(line.charCodeAt(d - 1))) d--;
  if (d === j || d < 2 || line[d - 1] !== ':') return line;
  return line.slice(j + 2);
}

function parseHex64(s: string): bigint | null {
  const d = s.replace(/^0+/, '');
  if (d.length > 16) return null;
  return d === '' ? 0n : BigInt(`0x${d}`);
}

const PERM = /^[-rwxp]+$/;
const PERM_PREFIX = /^[-rwxp]+/;
const XDIGITS = /^[0-9a-fA-F]+$/;
const MAJMIN = /^[0-9a-fA-F]+:[0-9a-fA-F]+$/;
const DIGITS_PREFIX = /^[0-9]+/;
const ALL_DIGITS = /^[0-9]+$/;
const AT_OFFSET = /^\(@([0-9a-fA-F]+)\)/;
const XDIGIT_PREFIX = /^[0-9a-fA-F]+/;

/**
 * One maps line (parseMappingEntry): the mapping, 'skip' for a non-executable entry, or
 * null when unrecognised. Tokens are whitespace-separated; this equals pprof's patterns on
 * well-formed lines (it does not re-split a hex run that lacks its separator).
 */
export function parseMapsLine(line: string): TextMapping | 'skip' | null {
  let j = ws(line, 0);
  if (line.startsWith('0x', j)) j += 2;
  const s0 = j;
  j = xdigits(line, j);
  if (j === s0) return null;
  const start = line.slice(s0, j);
  if (line[j] === '-' || isSpace(line.charCodeAt(j))) j++;
  j = ws(line, j);
  if (line.startsWith('0x', j) && isXDigit(line.charCodeAt(j + 2))) j += 2;
  const e0 = j;
  j = xdigits(line, j);
  if (j === e0) return null;
  const end = line.slice(e0, j);
  if (line[j] === ':') j++;
  const rest = line.slice(j);
  const toks = rest.length > 0 && isSpace(rest.charCodeAt(0)) ? rest.split(/[\t\n\f\r ]+/).slice(1, 8) : [];
  if (toks.length > 0 && toks[toks.length - 1] === '') toks.pop();

  let perm = '';
  let offset = '';
  let file = '';
  let buildId = '';
  let matched = false;
  // /proc/self/maps: [perms] [offset] maj:min inode [file]
  {
    let k = 0;
    let p = '';
    let o = '';
    if (toks[k] !== undefined && PERM.test(toks[k]!)) p = toks[k++]!;
    if (toks[k] !== undefined && XDIGITS.test(toks[k]!)) o = toks[k++]!;
    if (toks[k] !== undefined && MAJMIN.test(toks[k]!) && toks[k + 1] !== undefined && DIGITS_PREFIX.test(toks[k + 1]!)) {
      perm = p;
      offset = o;
      file = ALL_DIGITS.test(toks[k + 1]!) ? (toks[k + 2] ?? '') : '';
      matched = true;
    }
  }
  if (!matched) {
    // brief: [perms] [file] [(@offset)] [buildid]
    let k = 0;
    const t0 = toks[k];
    let stop = false;
    if (t0 !== undefined) {
      const pm = PERM_PREFIX.exec(t0);
      if (pm) {
        perm = pm[0];
        k++;
        stop = pm[0].length !== t0.length;
      }
    }
    if (!stop && toks[k] !== undefined) file = toks[k++]!;
    if (!stop && toks[k] !== undefined) {
      const m = AT_OFFSET.exec(toks[k]!);
      if (m) {
        offset = m[1]!;
        stop = m[0].length !== toks[k]!.length;
        k++;
      }
    }
    if (!stop && toks[k] !== undefined) buildId = XDIGIT_PREFIX.exec(toks[k]!)?.[0] ?? '';
  }
  if (perm !== '' && !perm.includes('x')) return 'skip';
  const s = parseHex64(start);
  const e = parseHex64(end);
  const o = offset === '' ? 0n : parseHex64(offset);
  if (s === null || e === null || o === null) return null;
  return { start: s, limit: e, offset: o, file: Buffer.from(file, 'latin1').toString('utf8'), buildId };
}

const LIB_RX = /\.so$|\.so[._][0-9]/;

function adjacent(m1: TextMapping, m2: TextMapping): boolean {
  if (m1.file !== '' && m2.file !== '' && m1.file !== m2.file) return false;
  if (m1.buildId !== '' && m2.buildId !== '' && m1.buildId !== m2.buildId) return false;
  if (m1.limit !== m2.start) return false;
  if (m1.offset !== 0n && m2.offset !== 0n) {
    if (BigInt.asUintN(64, m1.offset + (m1.limit - m1.start)) !== m2.offset) return false;
  }
  return true;
}

/** massageMappings: merge adjacent entries, move the main binary first. */
function massageMappings(maps: TextMapping[]): TextMapping[] {
  let out = maps;
  if (maps.length > 1) {
    out = [maps[0]!];
    for (const m of maps.slice(1)) {
      const lm = out[out.length - 1]!;
      if (adjacent(lm, m)) {
        lm.limit = m.limit;
        if (m.file !== '') lm.file = m.file;
        if (m.buildId !== '') lm.buildId = m.buildId;
        continue;
      }
      out.push(m);
    }
  }
  for (let i = 0; i < out.length; i++) {
    const file = trim(out[i]!.file.split('(deleted)').join(''));
    if (file.length === 0 || LIB_RX.test(file) || file[0] === '[') continue;
    const t = out[0]!;
    out[0] = out[i]!;
    out[i] = t;
    break;
  }
  return out;
}

/** Finds the first mapping (in list order) containing an address; see remapMappingIDs. */
class MappingFinder {
  private sorted: TextMapping[] | null = null;
  private work = 0;
  constructor(
    private readonly maps: TextMapping[],
    private readonly name: string,
  ) {
    this.rebuild();
  }

  rebuild(): void {
    const live = this.maps.filter((m) => m.start < m.limit).sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
    let disjoint = true;
    for (let i = 1; i < live.length; i++) if (live[i - 1]!.limit > live[i]!.start) disjoint = false;
    this.sorted = disjoint ? live : null;
    this.charge(this.maps.length);
  }

  private charge(n: number): void {
    this.work += n;
    if (this.work > 200_000_000) {
      throw new ProfileFormatError(`${this.name}: has too many overlapping memory mappings to resolve its addresses`);
    }
  }

  find(a: bigint): TextMapping | undefined {
    const s = this.sorted;
    if (s) {
      let lo = 0;
      let hi = s.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (s[mid]!.start <= a) lo = mid + 1;
        else hi = mid;
      }
      const m = lo > 0 ? s[lo - 1]! : undefined;
      return m && a < m.limit ? m : undefined;
    }
    this.charge(this.maps.length);
    return this.maps.find((m) => m.start <= a && a < m.limit);
  }

  /** The legacy fix-up: a mapping whose offset reaches back over `a` is extended to it. */
  extend(a: bigint): TextMapping | undefined {
    this.charge(this.maps.length);
    for (const m of this.maps) {
      if (m.offset !== 0n && BigInt.asUintN(64, m.start - m.offset) <= a && a < m.start) {
        m.start = BigInt.asUintN(64, m.start - m.offset);
        m.offset = 0n;
        this.rebuild();
        return m;
      }
    }
    return undefined;
  }
}

/**
 * The mappings of the parsed maps lines after pprof's massage, and for each location
 * address (already decremented) the mapping it belongs to (undefined for address 0).
 */
export function assignMappings(raw: TextMapping[], addrs: readonly Numeric[], name: string): { maps: TextMapping[]; of: (TextMapping | undefined)[] } {
  let maps = massageMappings(raw);
  if (maps.length > 1 && maps[0]!.file.startsWith('/anon_hugepage') && maps[0]!.limit === maps[1]!.start) maps = maps.slice(1);
  if (maps.length > 0) {
    const m = maps[0]!;
    if (BigInt.asUintN(64, m.start - m.offset) === 0x400000n) {
      m.start = 0x400000n;
      m.offset = 0n;
    }
  }
  const of: (TextMapping | undefined)[] = new Array(addrs.length);
  const finder = new MappingFinder(maps, name);
  let fake: TextMapping | undefined;
  for (let i = 0; i < addrs.length; i++) {
    const a = addrs[i]!;
    if (isZero(a)) continue;
    const ab = toBig(a);
    let m = finder.find(ab) ?? finder.extend(ab);
    if (!m) {
      if (!fake) {
        fake = { start: 0n, limit: U64_MAX, offset: 0n, file: '', buildId: '' };
        maps.push(fake);
      }
      m = fake;
    }
    of[i] = m;
  }
  return { maps, of };
}
