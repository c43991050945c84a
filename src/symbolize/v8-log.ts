/**
 * The functions TurboFan or Maglev inlined into an optimised code object, from V8's own log.
 *
 * V8's perf map gives one name per code object, its outer function: a small function inlined
 * into its caller disappears, and its memory is charged to the caller. V8 knows better: with
 * `--log-code --log-source-position` its log (`isolate-0x<isolate>-<pid>-v8.log` in the
 * process's working directory; `--perf-basic-prof` opens it, with `--log` implied, and
 * `--logfile` is refused in NODE_OPTIONS) has, for every code object it creates,
 *
 *   code-creation,<tag>,<kind>,<time>,<start>,<size>,<name>[,<sfi>,<marker>]
 *   code-source-info,<start>,<script>,<from>,<to>,<positions>,<inlinings>,<functions>
 *
 * (src/logging/log.cc, `AppendCodeCreateHeader`, `LogSourceCodeInformation`), where
 * `<positions>` is the code's source position table, `C<code offset>O<script offset>[I<inlining
 * id>]` (each entry holds from its code offset to the next one's), `<inlinings>` the inlining
 * tree, `F<function index>O<call site's script offset>[I<the call site's own inlining id>]` (no
 * I: the call is in the outer function), and `<functions>` the inlined functions'
 * SharedFunctionInfo addresses, `S0x…`, which the `code-creation` lines of those functions'
 * own code (their 8th field) name (`name script:line:column`, as in the perf map). SFIs move
 * in a collection (`sfi-move,<from>,<to>`); so does code, rarely (`code-move,<from>,<to>`).
 * Strings are escaped: `\x2C` for a comma, `\n`, `\\`, `\xNN` and `\uNNNN`.
 *
 * Run turns the flags on from its exit hook as Node starts (`v8.setFlagsFromString`, before the
 * program's code: src/symbolize/v8-log-start.cts), and records how far the perf map had been
 * written then: the k-th code object at one address and size after that point in the map is
 * the log's k-th at that address and size (V8 gives the addresses of freed code to new code).
 *
 * Verified on Node 20 (V8 11.3): `leak` inlined into `caller`'s TurboFan code reads
 * `F1O53I0` … `S0x…7398`, the SFI of `code-creation,JS,10,…,leak /tmp/inl.cjs:2:14,0x…7398,~`.
 */
import { type BigIntStats, closeSync, fstatSync, openSync, readdirSync, readFileSync, readlinkSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';

import { parsePerfName } from './perfmap.js';

/** One function inlined into optimised code. */
export interface InlinedFunction {
  /** As the perf map would name it: '(anonymous)' for an unnamed function. */
  name: string;
  file: string;
  /** 1-based line and column where the function starts (its perf-map line), 0 unknown. */
  line: number;
  column: number;
  /** The log's name field, decoded: `name script:line:column`. */
  raw: string;
}

interface CodeRecord {
  /** The log's name field, decoded (checked against the perf map's entry). */
  name: string;
  /** Its size in bytes, which a move keeps. */
  size: number;
  /** Sorted code offsets of the position table and each entry's inlining id (−1: none). */
  offsets?: Int32Array;
  ids?: Int32Array;
  /** Per inlining id: the function inlined and the inlining id of its call site (−1: outer). */
  functions?: (InlinedFunction | undefined)[];
  parents?: Int32Array;
}

export interface V8CodeLog {
  /** Code objects read, and how many of them have functions inlined. */
  readonly codeObjects: number;
  readonly withInlining: number;
  /**
   * The functions inlined at return address `pc` of the code object at `start` of `size` bytes
   * named `name` (its perf-map name without tag and tier: `caller /app.js:3:16`), innermost
   * first, its own function not included; `nth`: which of the log's code objects at that start
   * and size it is (0 the first, −1 the last). Empty when the log does not know it, or knows
   * no function inlined there; a function whose SFI the log never named (compiled before the
   * log started: Node's own bootstrap) is left out, its call site kept.
   */
  inlinedAt(start: number, size: number, name: string, pc: number, nth: number): InlinedFunction[];
}

const unescapeLog = (s: string): string =>
  s.indexOf('\\') < 0
    ? s
    : s.replace(/\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|n|\\)/g, (_, e: string) =>
        e === 'n' ? '\n' : e === '\\' ? '\\' : String.fromCharCode(parseInt(e.slice(1), 16)),
      );

const JS_TAGS = new Set(['JS', 'Function', 'LazyCompile', 'Script', 'Eval']);

/** Reads V8 logs (one per isolate of a process) into one index. Unreadable files are skipped. */
export function readV8Logs(paths: readonly string[]): V8CodeLog {
  const log = new V8CodeLogImpl();
  for (const p of paths) {
    let data: Buffer;
    try {
      data = readFileSync(p);
    } catch {
      continue;
    }
    log.add(data);
  }
  return log;
}

/** Parses one V8 log's text (see the file comment), as strings of at most `partBytes` bytes. */
export function parseV8Log(text: string | Buffer, partBytes?: number): V8CodeLog {
  const log = new V8CodeLogImpl();
  log.add(typeof text === 'string' ? Buffer.from(text, 'latin1') : text, undefined, partBytes);
  return log;
}

const C = 'c'.charCodeAt(0);
const S = 's'.charCodeAt(0);
const COMMA = ','.charCodeAt(0);

/**
 * A code object's source position table, `C<code offset>O<script offset>[I<inlining id>]...`:
 * its code offsets in ascending order and each entry's inlining id (−1: none). Read by hand,
 * not by a regular expression: optimised code's tables are most of a log's bytes. The table is
 * `table` from `from` to `end`, read where it lies (a log's line is not copied out for it).
 */
export function positionTable(table: string, from = 0, end = table.length): { offsets: Int32Array; ids: Int32Array } {
  let n = 0;
  for (let i = from; i < end; i++) if (table.charCodeAt(i) === 67 /* C */) n++;
  const offsets = new Int32Array(n);
  const ids = new Int32Array(n);
  let k = 0;
  let sorted = true;
  let i = from;
  const number = (): number => {
    let sign = 1;
    if (i < end && table.charCodeAt(i) === 45 /* - */) {
      sign = -1;
      i++;
    }
    let v = 0;
    for (let c = table.charCodeAt(i); i < end && c >= 48 && c <= 57; c = table.charCodeAt(++i)) v = v * 10 + (c - 48);
    return sign * v;
  };
  while (i < end && k < n) {
    if (table.charCodeAt(i) !== 67) {
      i++;
      continue;
    }
    i++;
    offsets[k] = number();
    if (i < end && table.charCodeAt(i) === 79 /* O */) {
      i++;
      number();
    }
    if (i < end && table.charCodeAt(i) === 73 /* I */) {
      i++;
      ids[k] = number();
    } else ids[k] = -1;
    if (k > 0 && offsets[k]! < offsets[k - 1]!) sorted = false;
    k++;
  }
  if (sorted) return { offsets: offsets.subarray(0, k), ids: ids.subarray(0, k) };
  // the table is in code order; kept sorted in case it is not (stable: equal offsets keep order)
  const order = Array.from({ length: k }, (_, j) => j).sort((a, b) => offsets[a]! - offsets[b]! || a - b);
  return { offsets: Int32Array.from(order, (j) => offsets[j]!), ids: Int32Array.from(order, (j) => ids[j]!) };
}

/** Per log (isolate): SFI address → function, the last code object created at an address. */
interface LogState {
  sfis: Map<number, InlinedFunction>;
  last: Map<number, CodeRecord>;
}
const newLogState = (): LogState => ({ sfis: new Map(), last: new Map() });

class V8CodeLogImpl implements V8CodeLog {
  /** `${start}:${size}` → the code objects created there, in log order. */
  private readonly byKey = new Map<string, CodeRecord[]>();
  codeObjects = 0;
  withInlining = 0;

  /** Reads one log's lines; `state` carries a log read in parts (its SFIs, the last code at each
   * address) from one part to the next. Each part of at most `partBytes` bytes that ends at a
   * line's end is read as one string (V8's strings are bounded, at ~512 MiB on 64-bit builds);
   * a line longer than a part is not read, as by the follower. */
  add(data: Buffer, state: LogState = newLogState(), partBytes = CHUNK): void {
    for (let from = 0; from < data.length; ) {
      let end = Math.min(data.length, from + partBytes);
      if (end < data.length) {
        const nl = data.lastIndexOf(10, end - 1);
        if (nl < from) {
          const next = data.indexOf(10, end); // a line longer than a part: skipped whole
          from = next < 0 ? data.length : next + 1;
          continue;
        }
        end = nl + 1;
      }
      this.addText(data.toString('latin1', from, end), state);
      from = end;
    }
  }

  private addText(text: string, state: LogState): void {
    const { sfis, last } = state;
    for (let from = 0; from < text.length; ) {
      let nl = text.indexOf('\n', from);
      if (nl < 0) nl = text.length; // an unfinished last line: its fields are checked below
      const first = text.charCodeAt(from);
      const at = from;
      from = nl + 1;
      if (first !== C && first !== S) continue;
      // only the lines wanted are split (script-source lines can be large)
      if (text.startsWith('code-creation,', at)) {
        const f = text.slice(at, nl).split(',');
        const start = parseInt(f[4] ?? '', 16);
        const size = Number(f[5]);
        if (!Number.isSafeInteger(start) || !Number.isSafeInteger(size) || f.length < 7) continue;
        const name = unescapeLog(f[6]!);
        const rec: CodeRecord = { name, size };
        const key = `${start}:${size}`;
        const list = this.byKey.get(key);
        if (list) list.push(rec);
        else this.byKey.set(key, [rec]);
        last.set(start, rec);
        this.codeObjects++;
        const sfi = f.length >= 8 ? parseInt(f[7]!, 16) : NaN;
        if (JS_TAGS.has(f[1]!) && Number.isSafeInteger(sfi) && sfi > 0 && !sfis.has(sfi)) {
          const p = parsePerfName(`${f[1]}:~${name}`);
          sfis.set(sfi, { name: p.name, file: p.file, line: p.line, column: p.column, raw: name });
        }
      } else if (text.startsWith('code-source-info,', at)) {
        // most code inlines nothing: its line ends with two empty fields, and its position
        // table (the line's bulk) is not split
        if (nl - at > 2 && text.charCodeAt(nl - 1) === COMMA && text.charCodeAt(nl - 2) === COMMA) continue;
        // the fields by their commas (an eighth field, if V8 ever adds one, is not read)
        const comma: number[] = [];
        for (let c = text.indexOf(',', at); c >= 0 && c < nl && comma.length < 8; c = text.indexOf(',', c + 1)) comma.push(c);
        if (comma.length < 7 || comma[6]! === comma[5]! + 1) continue; // nothing inlined
        const rec = last.get(parseInt(text.slice(comma[0]! + 1, comma[1]!), 16));
        if (!rec || rec.offsets) continue;
        const { offsets, ids } = positionTable(text, comma[4]! + 1, comma[5]!);
        const inlinings = text.slice(comma[5]! + 1, comma[6]!);
        const functionsField = text.slice(comma[6]! + 1, comma[7] ?? nl);
        const fns = [...functionsField.matchAll(/S(?:0x)?([0-9a-fA-F]+)/g)].map((m) => sfis.get(parseInt(m[1]!, 16)));
        const functions: (InlinedFunction | undefined)[] = [];
        const parents: number[] = [];
        for (const m of inlinings.matchAll(/F(\d*)O(-?\d+)(?:I(\d+))?/g)) {
          functions.push(m[1] === '' ? undefined : fns[Number(m[1])]);
          parents.push(m[3] === undefined ? -1 : Number(m[3]));
        }
        rec.offsets = offsets;
        rec.ids = ids;
        rec.functions = functions;
        rec.parents = Int32Array.from(parents);
        this.withInlining++;
      } else if (text.startsWith('sfi-move,', at)) {
        const f = text.slice(at, nl).split(',');
        const a = parseInt(f[1] ?? '', 16);
        const b = parseInt(f[2] ?? '', 16);
        const fn = sfis.get(a);
        if (fn) {
          sfis.delete(a);
          sfis.set(b, fn);
        }
      } else if (text.startsWith('code-move,', at)) {
        const f = text.slice(at, nl).split(',');
        const a = parseInt(f[1] ?? '', 16);
        const b = parseInt(f[2] ?? '', 16);
        const rec = last.get(a);
        if (!rec || !Number.isSafeInteger(b)) continue;
        // the moved object keeps its size: it is added at the new start under that key (within
        // one log it is that key's last; two logs read in turns into one index may have put
        // another's code there since, and the move is then not followed)
        if (this.byKey.get(`${a}:${rec.size}`)?.at(-1) === rec) {
          const k2 = `${b}:${rec.size}`;
          const l2 = this.byKey.get(k2);
          if (l2) l2.push(rec);
          else this.byKey.set(k2, [rec]);
        }
        last.delete(a);
        last.set(b, rec);
      }
    }
  }

  inlinedAt(start: number, size: number, name: string, pc: number, nth: number): InlinedFunction[] {
    const list = this.byKey.get(`${start}:${size}`);
    if (!list) return [];
    const rec = nth < 0 ? list[list.length - 1] : list[nth];
    // the log and the perf map must agree on what was there, or nothing is said
    if (!rec || rec.name !== name || !rec.offsets || !rec.ids || !rec.parents || !rec.functions) return [];
    // a return address: the call is the byte before it
    const off = pc - 1 - start;
    let lo = 0;
    let hi = rec.offsets.length - 1;
    let idx = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (rec.offsets[mid]! <= off) {
        idx = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    if (idx < 0) return [];
    const out: InlinedFunction[] = [];
    let id = rec.ids[idx]!;
    for (let guard = 0; id >= 0 && id < rec.functions.length && guard < 256; guard++) {
      const fn = rec.functions[id];
      if (fn) out.push(fn);
      id = rec.parents[id]!;
    }
    return out;
  }
}

/** V8's logs of process `pid` in `dir` (`isolate-0x<isolate>-<pid>-v8.log`, one per isolate). */
export function v8LogsIn(dir: string, pid: number): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names.filter((f) => /^isolate-0x[0-9a-f]+-(\d+)-v8\.log$/.exec(f)?.[1] === String(pid)).map((f) => join(dir, f));
}

/** V8's logs this process has open (`isolate-0x<isolate>-<pid>-v8.log`, one per isolate), by
 * their paths as the kernel has them: wherever the working directory was when each opened. */
export function v8LogsOpenHere(): string[] {
  let fds: string[];
  try {
    fds = readdirSync('/proc/self/fd');
  } catch {
    return [];
  }
  const own = new RegExp(`/isolate-0x[0-9a-f]+-${process.pid}-v8\\.log$`);
  const paths = new Set<string>();
  for (const fd of fds) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (own.test(target)) paths.add(target);
    } catch {
      /* closed meanwhile */
    }
  }
  return [...paths];
}

/** Where reading a log starts: its size when the code events began (what came before, of a
 * Node started with --log-code, is older than the perf-map point the matching counts from). */
export type LogStarts = Readonly<Record<string, number>>;

const CHUNK = 16 << 20; // bytes read at a time: a first read of a long-running process's log is bounded

const fileKey = (stat: BigIntStats): string => `${stat.dev}:${stat.ino}`;

/**
 * V8's logs read as they grow, into one index kept across calls: each call reads what V8
 * appended to each log since the last, up to its last complete line. A log is append-only
 * while its isolate lives; one that shrank was replaced, and is read anew. A log that cannot be
 * read leaves the index as it was (inlined functions there then show as their caller).
 *
 * Two users: the in-process API (src/node/engine.ts), whose `update()` follows the logs this
 * process has open, by path; and `run` (src/run/post.ts), whose `updatePaths()` follows a
 * child's logs while it runs, by file (device and inode), so that a log moved into the run's
 * folder after the child ended (a rename) goes on from where it was.
 */
export class V8LogFollower {
  readonly log = new V8CodeLogImpl();
  private readonly files = new Map<string, { read: number; state: LogState; skipLine: boolean }>();

  constructor(readonly starts: LogStarts = {}) {}

  /** Reads what was appended to the logs this process has open; returns the index (the same
   * object every time). */
  update(): V8CodeLog {
    for (const path of v8LogsOpenHere()) {
      try {
        this.follow(path, false);
      } catch {
        /* unreadable now: tried again at the next update */
      }
    }
    return this.log;
  }

  /** Reads what was appended to the logs at `paths`; true when every one of them was a file
   * already followed (none new to the index). */
  updatePaths(paths: readonly string[]): boolean {
    let known = true;
    for (const path of paths) {
      try {
        known = this.follow(path, true) && known;
      } catch {
        known = false;
      }
    }
    return known;
  }

  /** Whether every log at `paths` is a file already followed (nothing is read). */
  follows(paths: readonly string[]): boolean {
    return paths.every((path) => {
      try {
        return this.files.has(fileKey(statSync(path, { bigint: true })));
      } catch {
        return false;
      }
    });
  }

  /** Whether the file was followed before this call. */
  private follow(path: string, byFile: boolean): boolean {
    const fd = openSync(path, 'r');
    try {
      const stat = fstatSync(fd, { bigint: true });
      const key = byFile ? fileKey(stat) : path;
      let f = this.files.get(key);
      const known = f !== undefined;
      if (!f) {
        f = { read: this.starts[path] ?? 0, state: newLogState(), skipLine: false };
        this.files.set(key, f);
      }
      const size = Number(stat.size);
      if (size < f.read) {
        f.read = 0; // replaced: its records so far are of another log
        f.state = newLogState();
        f.skipLine = false;
      }
      const chunk = Buffer.allocUnsafe(Math.min(CHUNK, Math.max(0, size - f.read)));
      while (f.read < size) {
        const got = readSync(fd, chunk, 0, Math.min(chunk.length, size - f.read), f.read);
        if (got <= 0) return known;
        let from = 0;
        if (f.skipLine) {
          // the rest of a line longer than a chunk: not one this index reads whole
          from = chunk.subarray(0, got).indexOf(10) + 1;
          if (from === 0) {
            f.read += got;
            continue;
          }
          f.skipLine = false;
        }
        const end = chunk.subarray(0, got).lastIndexOf(10) + 1; // up to the last whole line
        if (end <= from) {
          if (got < chunk.length) return known; // a line still being written: read at the next update
          f.read += got; // a line longer than a chunk
          f.skipLine = true;
          continue;
        }
        this.log.add(chunk.subarray(from, end), f.state);
        f.read += end;
      }
      return known;
    } finally {
      closeSync(fd);
    }
  }
}
