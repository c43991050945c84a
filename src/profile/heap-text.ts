/**
 * The gperftools heap_v2 text codec, read as google/pprof reads it (profile/legacy_profile.go
 * parseHeap, profile.go massageMappings, remapMappingIDs) and written so that pprof reads it
 * back. Format notes: the shared notes, formats-and-tools.md §1.
 *
 * Reading:
 *  - line 1 must hold the header `heap profile: N: M [N2: M2] @ heap_v2/R` (pprof's pattern,
 *    unanchored; labels heap_v2/heapz_v2 (R), heap (R/2), heapprofile (no sampling), and the
 *    growthz/fragmentationz headers); otherwise the input is "unrecognised";
 *  - sample types: alloc_objects, alloc_space, inuse_objects, inuse_space when the bracket
 *    pair differs from the in-use pair and is not 0, else objects/count, space/bytes — exactly
 *    pprof's choice (not "always the four Go types"), so a parsed file matches
 *    `go tool pprof -raw` type for type; findSampleType and diff treat objects/space as
 *    inuse_objects/inuse_space;
 *  - each row is unsampled with its average size: scale = 1/(1 − exp(−(b/c)/R)), values
 *    truncated to integers (pprof's scaleHeapSample); a numeric label `bytes` holds the raw
 *    average size; every address is decremented by 1 (return address → call);
 *  - blank and `#` lines are skipped; `MAPPED_LIBRARIES:` (or `--- Memory map: ---`) starts
 *    the maps section, read by proc-maps.ts as pprof does;
 *  - drop_frames/keep_frames get pprof's allocator regexes;
 *  - lines are limited to 64 KiB (pprof's bufio.Scanner); every pattern is matched by a
 *    hand-written linear scanner (text-scan.ts; no backtracking regex on input).
 *  - records (rows, locations, mappings) and addresses count against ParseLimits.
 *
 * Writing (encodeHeapText), from a profile with *unsampled* values:
 *  - each row's raw sampled pair (c, b) is recovered by inverting pprof's unsampling: the
 *    pair that pprof maps back to (U, B) exactly, else the closest (see resample); exact
 *    for rows that came from heap_v2 text or from sampling (proto from the native writer:
 *    within pprof's truncation, ±1); values that sampling cannot produce (e.g. after scale
 *    or merge) get the nearest integer raw counts, so they come back approximately;
 *  - in-use values may be negative (diff profiles); a row with objects and bytes of opposite
 *    signs, or bytes without objects, cannot be written; alloc values must be ≥ 0;
 *  - the bracket holds the alloc totals when the profile has alloc_* types, else [0: 0]; as
 *    pprof's rule goes, a reader sees 4 sample types only if those totals differ from the
 *    in-use ones (nothing freed → 2 types, same numbers);
 *  - locations are written as address + 1 (return addresses); function names, labels other
 *    than the size, and comments' structure are not representable and are dropped;
 *  - mappings are written as /proc/self/maps lines (pprof's brief form when a hex build id
 *    is known, which keeps it); a file name with white space is cut there by readers.
 */
import { ProfileFormatError } from '../errors.js';
import {
  canon,
  findSampleType,
  hex,
  indexProfile,
  isZero,
  Label,
  Location,
  Mapping,
  type Numeric,
  Profile,
  Sample,
  str,
  StringTable,
  toBig,
  toNum,
  truncToInt64,
  U64_MAX,
  ValueType,
} from './model.js';
import { assignMappings, parseMapsLine, removeLoggingInfo, type TextMapping } from './proc-maps.js';
import { DEFAULT_LIMITS, type ParseLimits, type ParseResult } from './proto.js';
import { digits, excerpt, isDigit, isLowerHex, Lines, spaces, trim } from './text-scan.js';
import { validateProfile } from './validate.js';

/** pprof's DropFrames for heap profiles (legacy_profile.go allocRxStr). */
export const ALLOC_DROP_FRAMES = [
  'calloc', 'cfree', 'malloc', 'free', 'memalign', 'do_memalign', '(__)?posix_memalign', 'pvalloc', 'valloc', 'realloc',
  'tcmalloc::.*', 'tc_calloc', 'tc_cfree', 'tc_malloc', 'tc_free', 'tc_memalign', 'tc_posix_memalign', 'tc_pvalloc',
  'tc_valloc', 'tc_realloc', 'tc_new', 'tc_delete', 'tc_newarray', 'tc_deletearray', 'tc_new_nothrow',
  'tc_newarray_nothrow', 'malloc_zone_malloc', 'malloc_zone_calloc', 'malloc_zone_valloc', 'malloc_zone_realloc',
  'malloc_zone_memalign', 'malloc_zone_free', 'runtime\\..*', 'BaseArena::.*', '(::)?do_malloc_no_errno',
  '(::)?do_malloc_pages', '(::)?do_malloc', 'DoSampledAllocation', 'MallocedMemBlock::MallocedMemBlock', '_M_allocate',
  '__builtin_(vec_)?delete', '__builtin_(vec_)?new', '__gnu_cxx::new_allocator::allocate', '__libc_malloc',
  '__malloc_alloc_template::allocate', 'allocate', 'cpp_alloc', 'operator new(\\[\\])?', 'simple_alloc::allocate',
].join('|');

/** pprof's KeepFrames for heap profiles (allocSkipRxStr). */
export const ALLOC_KEEP_FRAMES = ['runtime\\.panic', 'runtime\\.reflectcall', 'runtime\\.call[0-9]*'].join('|');

/** `d1: d2 [d3: d4]` from `i` (heap header/sample shape); returns the groups and the end. */
function pairs(s: string, i: number, signed: boolean): { g: [string, string, string, string]; end: number } | null {
  const num = (j: number, sign: boolean): number => {
    if (sign && s.charCodeAt(j) === 45) j++;
    const e = digits(s, j);
    return isDigit(s.charCodeAt(j)) ? e : -1;
  };
  let j = i;
  let e = num(j, signed);
  if (e < 0) return null;
  const g1 = s.slice(j, e);
  if (s.charCodeAt(e) !== 58) return null;
  j = spaces(s, e + 1);
  e = num(j, signed);
  if (e < 0) return null;
  const g2 = s.slice(j, e);
  j = spaces(s, e);
  if (s.charCodeAt(j) !== 91) return null;
  j = spaces(s, j + 1);
  e = num(j, false);
  if (e < 0) return null;
  const g3 = s.slice(j, e);
  if (s.charCodeAt(e) !== 58) return null;
  j = spaces(s, e + 1);
  e = num(j, false);
  if (e < 0) return null;
  const g4 = s.slice(j, e);
  j = spaces(s, e);
  if (s.charCodeAt(j) !== 93) return null;
  return { g: [g1, g2, g3, g4], end: j + 1 };
}

interface Header {
  n1: string;
  m1: string;
  n2: string;
  m2: string;
  label: string;
  rate: string;
}

const HEADER = 'heap profile:';

/** heapHeaderRE's leftmost match in `line`. */
function matchHeader(line: string): Header | null {
  for (let at = line.indexOf(HEADER); at >= 0; at = line.indexOf(HEADER, at + 1)) {
    const p = pairs(line, spaces(line, at + HEADER.length), false);
    if (!p) continue;
    let j = spaces(line, p.end);
    if (line.charCodeAt(j) !== 64) continue; // '@'
    j = spaces(line, j + 1);
    if (!line.startsWith('heap', j)) continue;
    let e = j + 4;
    for (let c = line.charCodeAt(e); c === 95 || isDigit(c) || (c >= 97 && c <= 122); c = line.charCodeAt(++e));
    const label = line.slice(j, e);
    if (line.charCodeAt(e) === 47) e++;
    const r = digits(line, e);
    const [n1, m1, n2, m2] = p.g;
    return { n1, m1, n2, m2, label, rate: line.slice(e, r) };
  }
  return null;
}

/** growthHeaderRE / fragmentationHeaderRE: `… [N: M] @ growth` (z optional). */
function matchOtherHeader(line: string, word: string): boolean {
  for (let at = line.indexOf(HEADER); at >= 0; at = line.indexOf(HEADER, at + 1)) {
    const p = pairs(line, spaces(line, at + HEADER.length), false);
    if (p && line.startsWith(` @ ${word}`, p.end)) return true;
  }
  return false;
}

interface Row {
  g: [string, string, string, string];
  addrs: string;
}

/** heapSampleRE's leftmost match: `c: b [c2: b2] @ <[ x0-9a-f]*>` (in-use pair signed). */
function matchRow(line: string): Row | null {
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    const prev = i > 0 ? line.charCodeAt(i - 1) : -1;
    const candidate = (c === 45 && isDigit(line.charCodeAt(i + 1))) || (isDigit(c) && !isDigit(prev) && prev !== 45);
    if (!candidate) continue;
    const p = pairs(line, i, true);
    if (!p) continue;
    if (line.charCodeAt(p.end) !== 32 || line.charCodeAt(p.end + 1) !== 64) continue; // "] @"
    let e = p.end + 2;
    for (let ch = line.charCodeAt(e); ch === 32 || ch === 120 || isLowerHex(ch); ch = line.charCodeAt(++e));
    return { g: p.g, addrs: line.slice(p.end + 2, e) };
  }
  return null;
}

/** strconv.ParseInt(s, 10, 64); null when out of range. */
function int64(s: string): Numeric | null {
  const neg = s.charCodeAt(0) === 45;
  if (s.length - (neg ? 1 : 0) <= 15) return Number(s);
  const v = BigInt(s);
  if (v > 9223372036854775807n || v < -9223372036854775808n) return null;
  return canon(v);
}

/** hexNumberRE matches (`0x[0-9a-f]+`) in `s`, parsed as uint64; null on overflow. */
function hexAddresses(s: string, out: Numeric[]): string | null {
  let i = 0;
  for (;;) {
    i = s.indexOf('0x', i);
    if (i < 0) return null;
    let e = i + 2;
    while (isLowerHex(s.charCodeAt(e))) e++;
    if (e === i + 2) {
      i++;
      continue;
    }
    let d = s.slice(i + 2, e).replace(/^0+/, '');
    if (d === '') d = '0';
    if (d.length > 16) return s.slice(i, e);
    out.push(d.length <= 13 ? parseInt(d, 16) : canon(BigInt(`0x${d}`)));
    i = e;
  }
}

/** pprof's scaleHeapSample: the unsampled (count, bytes) of one raw pair. */
export function unsampleHeapPair(count: Numeric, size: Numeric, rate: Numeric): [Numeric, Numeric] {
  if (isZero(count) || isZero(size)) return [0, 0];
  if (rate <= 1) return [count, size];
  const c = toNum(count);
  const b = toNum(size);
  const scale = 1 / (1 - Math.exp(-(b / c) / toNum(rate)));
  return [truncToInt64(c * scale), truncToInt64(b * scale)];
}

/** Go's int64 division (truncating toward zero). */
function div64(a: Numeric, b: Numeric): Numeric {
  if (typeof a === 'number' && typeof b === 'number' && Math.abs(a) < 2 ** 31 && Math.abs(b) < 2 ** 31) {
    return Math.trunc(a / b);
  }
  return canon(BigInt.asIntN(64, toBig(a) / toBig(b)));
}

// ---------------------------------------------------------------------------------------
// Parsing

function sampleTypesFor(hasAlloc: boolean): [string, string][] {
  return hasAlloc
    ? [['alloc_objects', 'count'], ['alloc_space', 'bytes'], ['inuse_objects', 'count'], ['inuse_space', 'bytes']]
    : [['objects', 'count'], ['space', 'bytes']];
}

/**
 * parseHeapText: a gperftools heap profile (heap_v2 and pprof's other heap headers) as a
 * Profile, or "unrecognised" when line 1 is not a heap profile header. Any other problem
 * throws ProfileFormatError naming `name` and the line.
 */
export function parseHeapText(data: Uint8Array, name = 'profile', limits: ParseLimits = DEFAULT_LIMITS): ParseResult {
  const lines = new Lines(data, name);
  const first = lines.first();
  if (first === null) return { kind: 'unrecognised', reason: 'its first line is not a heap profile header' };
  const fail: (problem: string) => never = (problem) => {
    throw new ProfileFormatError(`${name}: line ${lines.lineNo} ${problem}`);
  };

  let sampling = '';
  let period: Numeric = 0;
  let hasAlloc = false;
  const h = matchHeader(first);
  if (h) {
    if (h.rate !== '') {
      const r = int64(h.rate);
      if (r === null) return { kind: 'unrecognised', reason: 'its heap profile header has an out-of-range rate' };
      period = r;
    }
    hasAlloc = (h.n2 !== h.n1 && h.n2 !== '0') || (h.m2 !== h.m1 && h.m2 !== '0');
    switch (h.label) {
      case 'heapz_v2':
      case 'heap_v2':
        sampling = 'v2';
        break;
      case 'heapprofile':
        period = 1;
        break;
      case 'heap':
        sampling = 'v2';
        period = div64(period, 2);
        break;
      default:
        return { kind: 'unrecognised', reason: `its heap profile header has the unknown label ${excerpt(h.label)}` };
    }
  } else if (matchOtherHeader(first, 'growth') || matchOtherHeader(first, 'fragmentation')) {
    period = 1;
  } else {
    return { kind: 'unrecognised', reason: 'its first line is not a heap profile header' };
  }

  let records = 0;
  let scalars = 0;
  const record = (n = 1) => {
    records += n;
    if (records > limits.maxRecords) fail(`takes the profile over ${limits.maxRecords} records, beyond this tool's limit`);
  };

  const samples: { value: Numeric[]; blocksize: Numeric; locs: number[] }[] = [];
  const comments: string[] = [];
  const locIndex = new Map<Numeric, number>();
  const locAddrs: Numeric[] = [];
  let line: string | null;
  let sentinel = false;
  while ((line = lines.next()) !== null) {
    const t = trim(line);
    if (t.length === 0) continue;
    if (t.charCodeAt(0) === 35) {
      // `# …` lines: the writer's comments (ours: its stats and pid), kept as profile comments
      record();
      comments.push(t.slice(1).trim());
      continue;
    }
    if (t.includes('MAPPED_LIBRARIES:') || t.includes('--- Memory map: ---')) {
      sentinel = true;
      break;
    }
    const row = matchRow(t);
    if (!row) fail(`is not a sample row (\`count: bytes [count: bytes] @ addresses\`): ${excerpt(t)}`);
    const value: Numeric[] = [];
    let blocksize: Numeric = 0;
    const add = (cs: string, ss: string, label: string) => {
      const count = int64(cs);
      const size = int64(ss);
      if (count === null || size === null) fail(`has a number outside the 64-bit range: ${excerpt(t)}`);
      if (isZero(count) && !isZero(size)) fail(`has ${label} count 0 but ${label} bytes ${String(size)}`);
      if (isZero(count)) {
        value.push(0, 0);
        return;
      }
      blocksize = div64(size, count);
      const [c, b] = sampling === 'v2' ? unsampleHeapPair(count, size, period) : [count, size];
      value.push(c, b);
    };
    if (hasAlloc) add(row.g[2], row.g[3], 'allocation');
    add(row.g[0], row.g[1], 'inuse');
    const addrs: Numeric[] = [];
    const bad = hexAddresses(row.addrs, addrs);
    if (bad !== null) fail(`has an address over 64 bits: ${excerpt(bad)}`);
    scalars += addrs.length;
    if (scalars > limits.maxScalars) fail(`takes the profile over ${limits.maxScalars} addresses, beyond this tool's limit`);
    const locs: number[] = [];
    for (const a of addrs) {
      const addr = isZero(a) ? canon(U64_MAX) : typeof a === 'number' ? a - 1 : canon(a - 1n);
      let li = locIndex.get(addr);
      if (li === undefined) {
        record();
        li = locAddrs.length;
        locAddrs.push(addr);
        locIndex.set(addr, li);
      }
      locs.push(li);
    }
    record();
    samples.push({ value, blocksize, locs });
  }

  // the maps section (parseAdditionalSections); without a sentinel the loop read to the end
  const raw: TextMapping[] = [];
  if (sentinel) {
    while ((line = lines.next()) !== null) {
      const m = parseMapsLine(removeLoggingInfo(line));
      if (m === null || m === 'skip') continue;
      record();
      raw.push(m);
    }
  }
  const { maps, of: locMapping } = assignMappings(raw, locAddrs, name);

  // The model.
  const st = new StringTable();
  const mapId = new Map<TextMapping, number>();
  const mapping = maps.map((m, i) => {
    mapId.set(m, i + 1);
    return new Mapping({
      id: i + 1,
      memoryStart: canon(m.start),
      memoryLimit: canon(m.limit),
      fileOffset: canon(m.offset),
      filename: st.dedup(m.file),
      buildId: st.dedup(m.buildId),
    });
  });
  const location = locAddrs.map((address, i) => {
    const m = locMapping[i];
    return new Location({ id: i + 1, mappingId: m ? mapId.get(m)! : 0, address });
  });
  const sampleType = sampleTypesFor(hasAlloc).map(([t, u]) => new ValueType({ type: st.dedup(t), unit: st.dedup(u) }));
  const bytesKey = st.dedup('bytes');
  const sample = samples.map(
    (s) =>
      new Sample({
        locationId: s.locs.map((i) => i + 1),
        value: s.value,
        label: [new Label({ key: bytesKey, num: s.blocksize })],
      }),
  );
  const profile = new Profile({
    sampleType,
    sample,
    mapping,
    location,
    stringTable: st,
    periodType: new ValueType({ type: st.dedup('space'), unit: st.dedup('bytes') }),
    period,
    dropFrames: st.dedup(ALLOC_DROP_FRAMES),
    keepFrames: st.dedup(ALLOC_KEEP_FRAMES),
    comment: comments.map((c) => st.dedup(c)),
  });
  return { kind: 'profile', profile };
}

// ---------------------------------------------------------------------------------------
// Writing

/** pprof's forward unsampling of a raw pair, as floats truncated (see unsampleHeapPair). */
function forward(c: number, b: number, rate: number): [number, number] {
  const scale = 1 / (1 - Math.exp(-(b / c) / rate));
  return [Math.trunc(c * scale), Math.trunc(b * scale)];
}

/** The least raw byte count b (1 ≤ b ≤ bytes) that pprof unsamples, with `c` objects, to at least `bytes`. */
function solveBytes(c: number, bytes: number, rate: number): number {
  let lo = 1;
  let hi = Math.max(1, bytes);
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (forward(c, mid, rate)[1] >= bytes) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/**
 * The raw sampled pair that pprof unsamples to (objects, bytes), or the closest one. Signs:
 * both negative or both positive; zero objects only with zero bytes; bytes 0 keeps the count
 * (pprof reads such a row as 0, 0). Search: raw counts c near objects/scale (all of 1..objects
 * when few, where truncation makes bytes/objects a poor size estimate); for each, the raw
 * bytes by bisection (unsampled bytes grow with raw bytes).
 */
function resample(
  objects: Numeric,
  bytes: Numeric,
  rate: number,
  fail: (p: string) => never,
  what: string,
  size?: number,
): [Numeric, Numeric] {
  if (isZero(objects) && isZero(bytes)) return [0, 0];
  if (isZero(objects)) fail(`has ${what} 0 objects but ${String(bytes)} bytes`);
  if (isZero(bytes) || rate <= 1) return [objects, bytes];
  const neg = objects < 0;
  if (neg !== bytes < 0) fail(`has ${what} ${String(objects)} objects but ${String(bytes)} bytes`);
  const u = Math.abs(toNum(objects));
  const b = Math.abs(toNum(bytes));
  const scale = 1 / (1 - Math.exp(-(b / u) / rate));
  const c0 = u / scale;
  // beyond 2^50 integers are too coarse to search (and no real row is that large)
  if (!(u < 2 ** 50 && b < 2 ** 50 && Number.isFinite(c0))) {
    const c = Math.max(1, Math.round(Number.isFinite(c0) ? c0 : 1));
    const bb = Math.max(1, Math.round(Number.isFinite(scale) ? b / scale : b));
    return neg ? [-c, -bb] : [c, bb];
  }
  const lo = u <= 32 ? 1 : Math.max(1, Math.floor(c0) - 2);
  const hi = u <= 32 ? u : Math.min(u, Math.ceil(c0) + 2);
  let best: [number, number] = [Math.max(1, Math.round(c0)), Math.max(1, Math.round(b / scale))];
  let bestErr = Infinity;
  for (let c = lo; c <= hi; c++) {
    // unsampled bytes grow by ½ to 1 per raw byte: a few raw byte counts share one value;
    // among exact ones, the one whose average is the sample's `bytes` label wins
    const bb = solveBytes(c, b, rate);
    for (let cand = Math.max(1, bb - 1); cand <= bb + 3; cand++) {
      const [fc, fb] = forward(c, cand, rate);
      let err = Math.abs(fc - u) / Math.max(u, 1) + Math.abs(fb - b) / Math.max(b, 1);
      if (err === 0 && size !== undefined && Math.trunc(cand / c) !== size) err = Number.MIN_VALUE;
      if (err < bestErr) {
        bestErr = err;
        best = [c, cand];
      }
    }
    if (bestErr === 0) break;
  }
  return neg ? [-best[0], -best[1]] : best;
}

function hex8(v: Numeric): string {
  return v.toString(16).padStart(8, '0');
}

/**
 * encodeHeapText: the profile as gperftools heap_v2 text that pprof (and parseHeapText)
 * read back to the same values, up to the re-sampling described at the top of this file.
 * Needs in-use sample types (inuse_objects/inuse_space, or objects/space).
 */
export function encodeHeapText(p: Profile, name = 'profile'): string {
  validateProfile(p, name);
  const fail: (problem: string) => never = (problem) => {
    throw new ProfileFormatError(`${name}: cannot be written as heap_v2 text: ${problem}`);
  };
  const types = p.sampleType.map((t) => str(p, t.type));
  const io = findSampleType(p, 'inuse_objects');
  const is = findSampleType(p, 'inuse_space');
  if (io < 0 || is < 0) fail(`it has no in-use objects and space sample types (it has ${types.join(', ') || 'none'})`);
  const ao = types.indexOf('alloc_objects');
  const as = types.indexOf('alloc_space');
  const hasAlloc = ao >= 0 && as >= 0;
  const period = p.period > 0 ? canon(toBig(p.period)) : 0;
  const rate = toNum(period);
  const ix = indexProfile(p);

  const rows: string[] = [];
  let sc = 0n;
  let sb = 0n;
  let sc2 = 0n;
  let sb2 = 0n;
  for (let i = 0; i < p.sample.length; i++) {
    const s = p.sample[i]!;
    const failRow: (problem: string) => never = (problem) => fail(`sample ${i + 1} ${problem}`);
    const sizeLabel = s.label.find((l) => str(p, l.key) === 'bytes' && isZero(l.str));
    const size = sizeLabel && typeof sizeLabel.num === 'number' ? sizeLabel.num : undefined;
    const [c, b] = resample(s.value[io]!, s.value[is]!, rate, failRow, 'in-use', size);
    let c2: Numeric = 0;
    let b2: Numeric = 0;
    if (hasAlloc) {
      const av = s.value[ao]!;
      const ab = s.value[as]!;
      if (av < 0 || ab < 0) failRow(`has negative allocation values (${String(av)}, ${String(ab)})`);
      [c2, b2] = resample(av, ab, rate, failRow, 'allocated', size);
    }
    sc += toBig(c);
    sb += toBig(b);
    sc2 += toBig(c2);
    sb2 += toBig(b2);
    let addrs = '';
    for (const id of s.locationId) {
      const loc = ix.locations.get(canon(toBig(id)))!;
      addrs += ` ${hex(canon(BigInt.asUintN(64, toBig(loc.address) + 1n)))}`;
    }
    rows.push(` ${String(c)}: ${String(b)} [${String(c2)}: ${String(b2)}] @${addrs}`);
  }
  const nonneg = (v: bigint) => (v < 0n ? 0n : v);
  const header = `heap profile: ${nonneg(sc)}: ${nonneg(sb)} [${nonneg(sc2)}: ${nonneg(sb2)}] @ heap_v2/${String(period)}`;

  const out = [header, ...rows, ''];
  for (const c of p.comment) out.push(`# ${str(p, c).replace(/[\r\n]+/g, ' ')}`);
  out.push('', 'MAPPED_LIBRARIES:');
  for (const m of p.mapping) {
    const file = str(p, m.filename);
    const buildId = str(p, m.buildId);
    if (file === '' && isZero(m.memoryStart) && toBig(m.memoryLimit) >= U64_MAX) continue; // pprof's fake mapping
    const range = `${hex8(m.memoryStart)}-${hex8(m.memoryLimit)} r-xp`;
    if (buildId !== '' && /^[0-9a-fA-F]+$/.test(buildId) && file !== '' && !/\s/.test(file)) {
      out.push(`${range} ${file} (@${m.fileOffset.toString(16)}) ${buildId}`);
    } else {
      out.push(`${range} ${hex8(m.fileOffset)} 00:00 0${file === '' ? '' : ` ${file}`}`);
    }
  }
  return `${out.join('\n')}\n`;
}
