/**
 * V8's perf map (`/tmp/perf-<pid>.map`, written under `--perf-basic-prof`): one line per code
 * object, `START SIZE NAME`, start and size in hex (with or without `0x`), the name to the end
 * of the line. V8 appends as it creates code; a later line covering an address supersedes
 * earlier ones (code moved or was replaced), so lookups answer with the newest entry containing
 * the address.
 *
 * Names written by Node 20 (V8 11.3), verified with `--perf-basic-prof
 * --interpreted-frames-native-stack`:
 *   `JS:~name /abs/path.js:LINE:COL`   interpreted (with the flag: a copy of the interpreter
 *                                       entry trampoline per function, 0x378 bytes; V8 also logs
 *                                       the BytecodeArray's heap address under the same name)
 *   `JS:^name …`                       Sparkplug baseline code
 *   `JS:*name …`                       TurboFan optimised code (`JS:+` would be Maglev)
 *   `JS:*'name …`, `JS:+'name …`       Node 24 and 26 (V8 13.6, 14.6): TurboFan and Maglev code
 *                                       specialised to one function context (`'fromString`
 *                                       where the quote is taken for the name)
 *   `JS:o*name …`, `JS:o+name …`       Node 26 (V8 14.6), Deno 2.9 (V8 15): the same, compiled
 *                                       on the stack (OSR)
 *   `JS:~ /path.js:8:18`               anonymous function (empty name)
 *   `JS:~get gx /path.js:1:19`         accessors carry `get `/`set ` in the name
 *   `Script:~ file:///path.mjs:1:1`, `Eval:~ /path.js:1:1`, `Eval:~ :1:1`   top-level code
 *   `Builtin:ArrayMap`, `BytecodeHandler:Add.Wide`   builtins and interpreter handlers
 *   `RegExp:a(b+)c`, `Stub:js-to-wasm:ii:i`, `JS:wasm-function[0]-0-liftoff`
 * ES modules' scripts are `file://` URLs, CommonJS ones absolute paths, Node's own `node:…`;
 * paths may contain spaces. LINE and COL are 1-based; COL is where the parameter list starts.
 * Older V8s wrote `LazyCompile:`/`Function:` for `JS:`; they are read the same way.
 * Both flags are accepted in NODE_OPTIONS on Node 20. `--perf-basic-prof` also makes V8 write
 * `isolate-<address>-<pid>-v8.log` into the working directory.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export type PerfSymbolKind = 'interpreted' | 'baseline' | 'optimized' | 'builtin' | 'other';

export interface PerfSymbol {
  /** Function name; '(anonymous)' for a JavaScript function without one; for non-JavaScript
   * entries (regexps, stubs) the whole raw name, e.g. `RegExp:a(b+)c`; builtins by their
   * symbol in node's binary, e.g. `Builtins_ArrayMap` for `Builtin:ArrayMap`. */
  name: string;
  /** Script path (file URLs converted to paths), `node:…` for Node's own; '' if none. */
  file: string;
  /** 1-based line and column of the function, 0 when unknown. */
  line: number;
  column: number;
  kind: PerfSymbolKind;
  /** The tag before the first `:` (`JS`, `Builtin`, `BytecodeHandler`, `RegExp` …). */
  tag: string;
  /** The NAME field as written. */
  raw: string;
  start: number;
  size: number;
  /** The byte offset just past the entry's line in the map (when it was written). */
  written?: number;
}

export interface PerfMap {
  /** The newest entry whose range contains `address`. */
  lookup(address: number | bigint): PerfSymbol | undefined;
  /** The newest entry whose range contains `address` among those within the map's first
   * `bytes` bytes: what the address was when the map had been written that far (V8 reuses
   * the addresses of freed code, so a newer entry may name later code). */
  lookupAt(address: number | bigint, bytes: number): PerfSymbol | undefined;
  /** How many entries with the same start and size as `sym` were written after the map's first
   * `fromBytes` bytes and before `sym`: which of that address's code objects since then it is
   * (V8's code log, src/symbolize/v8-log.ts, started at `fromBytes`). */
  twinsBefore(sym: PerfSymbol, fromBytes: number): number;
  /** Lines parsed into entries, and lines skipped as malformed (or a last, unfinished line). */
  readonly entries: number;
  readonly skipped: number;
}

/** `/tmp/perf-<pid>.map`, where V8 writes the map of process `pid`. */
export function perfMapPath(pid: number, dir = '/tmp'): string {
  return `${dir}/perf-${pid}.map`;
}

/**
 * Reads and parses a perf map file, or only its first `limit` bytes: the map as it stood
 * when a profile was taken. V8 reuses the addresses of freed code, so an entry written after
 * the profile may name one of its frames after code that did not exist yet (a process's exit
 * code compiling a RegExp where its top-level function had been). @throws the fs error when
 * the file cannot be read.
 */
export function readPerfMap(path: string, limit?: number): PerfMap {
  const data = readFileSync(path);
  return parsePerfMap(limit !== undefined && limit < data.length ? data.subarray(0, limit) : data);
}

const LINE = /^(?:0x)?([0-9a-fA-F]{1,16}) (?:0x)?([0-9a-fA-F]{1,16}) (.*)$/;
const JS_TAGS = new Set(['JS', 'LazyCompile', 'Function', 'Script', 'Eval']);
/** NAME LOCATION where LOCATION is `script:line:col`; a name is one word, optionally after
 * `get `/`set ` (accessors), so a script path may contain spaces. */
const JS_BODY = /^((?:(?:get|set) )?\S*) (.*):(\d+):(\d+)$/;
/** The tier marker at the start of a JavaScript entry's body: `~` interpreted, `^` Sparkplug,
 * `+` Maglev, `*` TurboFan; `+'` and `*'` the same compiled for one context (V8 12.x on, seen
 * from Node 24); an `o` before it (V8 14 on: Node 26, Deno 2.9) marks OSR code. The `'` is part of
 * the marker, never of the name (a name cannot start right after the tier with a quote). */
const TIER = /^o?([~^]|[*+]'?)/;

/** Parses a perf map. Malformed lines are skipped, as is a last line without a newline (V8
 * may be half-way through writing it). Offsets are counted in the file's bytes (a name V8
 * wrote as invalid UTF-8 does not shift them). */
export function parsePerfMap(text: string | Buffer): PerfMap {
  const data = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  let skipped = 0;
  const starts: number[] = [];
  const ends: number[] = [];
  const raws: string[] = [];
  const written: number[] = []; // the byte offset just past each entry's line
  for (let from = 0; from < data.length; ) {
    const nl = data.indexOf(10, from);
    if (nl < 0) {
      skipped++; // unfinished
      break;
    }
    const line0 = data.toString('utf8', from, nl);
    from = nl + 1;
    const offset = from;
    const line = line0.endsWith('\r') ? line0.slice(0, -1) : line0;
    const m = LINE.exec(line);
    const start = m ? parseInt(m[1]!, 16) : NaN;
    const size = m ? parseInt(m[2]!, 16) : NaN;
    if (!m || !Number.isSafeInteger(start) || !Number.isSafeInteger(start + size) || size <= 0) {
      skipped++;
      continue;
    }
    starts.push(start);
    ends.push(start + size);
    raws.push(m[3]!);
    written.push(offset);
  }
  return new PerfMapImpl(starts, ends, raws, written, skipped);
}

/** Splits a perf-map NAME into the fields of a PerfSymbol. */
export function parsePerfName(raw: string): Pick<PerfSymbol, 'name' | 'file' | 'line' | 'column' | 'kind' | 'tag'> {
  const colon = raw.indexOf(':');
  const tag = colon > 0 && /^[A-Za-z]+$/.test(raw.slice(0, colon)) ? raw.slice(0, colon) : '';
  if (tag === 'Builtin' || tag === 'BytecodeHandler') return { name: builtinSymbol(tag, raw.slice(colon + 1)), file: '', line: 0, column: 0, kind: 'builtin', tag };
  if (!JS_TAGS.has(tag)) return { name: raw, file: '', line: 0, column: 0, kind: 'other', tag };
  let body = raw.slice(colon + 1);
  // the code kind's marker (V8's CodeKindToMarker), `o` before it for code compiled on the
  // stack (OSR); nothing for an interpreted function whose optimisation is disabled
  const tier = TIER.exec(body);
  let kind: PerfSymbolKind = 'other';
  if (tier) {
    const marker = tier[1]![0];
    kind = marker === '~' ? 'interpreted' : marker === '^' ? 'baseline' : 'optimized';
    body = body.slice(tier[0].length);
  }
  const m = JS_BODY.exec(body);
  if (!m) return { name: body || unnamed(tag), file: '', line: 0, column: 0, kind, tag };
  const line = Number(m[3]);
  const column = Number(m[4]);
  return { name: m[1] || unnamed(tag, line, column), file: scriptPath(m[2]!), line, column, kind, tag };
}

/**
 * A builtin's or bytecode handler's name as node's own symbol table has it, where the
 * builtins run from the binary's embedded blob: `Builtin:JSEntry` is `Builtins_JSEntry`,
 * `BytecodeHandler:Add` (`Add.Wide`, or `AddWide` from Node 24) is `Builtins_AddHandler`
 * (`Builtins_AddWideHandler`), Node 20 to 26. So a frame reads the same whether it was named
 * from the binary (run names V8's copy of the blob by its symbols, src/symbolize/code-copies.ts)
 * or from the perf map (`symbolize` of a raw dump), and `diff` matches the two.
 */
function builtinSymbol(tag: string, name: string): string {
  const plain = name.replace(/\.(Wide|ExtraWide)$/, '$1');
  return tag === 'Builtin' ? `Builtins_${plain}` : `Builtins_${plain}Handler`;
}

/**
 * The name of a JavaScript frame without one. V8 tags a script's or module's top-level code
 * `Script:` while it is interpreted, but `JS:` with an empty name once it is compiled on the
 * stack (a long top-level loop), and a CommonJS module's top level is the unnamed wrapper
 * function: an unnamed function that starts at 1:1 is the file's top level either way (a
 * function literal of its own cannot start there unnamed).
 */
function unnamed(tag: string, line = 0, column = 0): string {
  if (tag === 'Eval') return '(eval)';
  return tag === 'Script' || (line === 1 && column === 1) ? '(top level)' : '(anonymous)';
}

/** Whether a perf-map NAME (a function's system name after symbolisation) is JavaScript code:
 * a function, or a script's, module's or eval's top-level code. */
export function isJavaScriptName(raw: string): boolean {
  const colon = raw.indexOf(':');
  return colon > 0 && JS_TAGS.has(raw.slice(0, colon));
}

function scriptPath(script: string): string {
  if (script.startsWith('file://')) {
    try {
      return fileURLToPath(script);
    } catch {
      return script;
    }
  }
  return script;
}

/**
 * The entries painted oldest first onto the address line, newer over older: `segStart[i]`
 * begins a run of addresses owned by entry `segOwner[i]` (−1: none) up to `segStart[i + 1]`;
 * where older entries lie under the owner (reused addresses), `segUnder` lists every entry of
 * the run, newest first, for lookups at an earlier point of the map.
 */
class PerfMapImpl implements PerfMap {
  private readonly segStart: Float64Array;
  private readonly segOwner: Int32Array;
  private readonly segUnder = new Map<number, number[]>();
  private readonly parsed = new Map<number, PerfSymbol>();
  private twins: Map<number, number[]> | undefined;

  constructor(
    private readonly starts: number[],
    private readonly ends: number[],
    private readonly raws: string[],
    private readonly written: number[],
    readonly skipped: number,
  ) {
    const n = starts.length;
    // sweep the sorted boundaries with a max-heap of active entries by index (newest on top)
    const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => starts[a]! - starts[b]!);
    const bounds = [...new Set([...starts, ...ends])].sort((a, b) => a - b);
    const heap: number[] = [];
    const push = (v: number) => {
      heap.push(v);
      let i = heap.length - 1;
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (heap[p]! >= heap[i]!) break;
        [heap[p], heap[i]] = [heap[i]!, heap[p]!];
        i = p;
      }
    };
    const pop = () => {
      const last = heap.pop()!;
      if (heap.length === 0) return;
      heap[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && heap[l]! > heap[m]!) m = l;
        if (r < heap.length && heap[r]! > heap[m]!) m = r;
        if (m === i) break;
        [heap[m], heap[i]] = [heap[i]!, heap[m]!];
        i = m;
      }
    };
    const segStart: number[] = [];
    const segOwner: number[] = [];
    let k = 0;
    for (const b of bounds) {
      while (k < n && starts[order[k]!]! <= b) push(order[k++]!);
      while (heap.length > 0 && ends[heap[0]!]! <= b) pop();
      const owner = heap.length > 0 ? heap[0]! : -1;
      // the heap drops an ended entry only from its top: those below may have ended already
      const covering = heap.length > 1 ? heap.filter((e) => ends[e]! > b) : [];
      const under = covering.length > 1 ? covering.sort((x, y) => y - x) : undefined;
      const last = segOwner.length - 1;
      const sameUnder = (this.segUnder.get(last)?.join() ?? '') === (under?.join() ?? '');
      if (segOwner.length === 0 || segOwner[last] !== owner || !sameUnder) {
        segStart.push(b);
        segOwner.push(owner);
        if (under) this.segUnder.set(segOwner.length - 1, under);
      }
    }
    this.segStart = Float64Array.from(segStart);
    this.segOwner = Int32Array.from(segOwner);
  }

  get entries(): number {
    return this.starts.length;
  }

  lookup(address: number | bigint): PerfSymbol | undefined {
    return this.lookupAt(address, Infinity);
  }

  twinsBefore(sym: PerfSymbol, fromBytes: number): number {
    if (!this.twins) {
      // the entries by their start (a number key: tsc's map has ~10^5 entries)
      this.twins = new Map();
      for (let i = 0; i < this.starts.length; i++) {
        const list = this.twins.get(this.starts[i]!);
        if (list) list.push(i);
        else this.twins.set(this.starts[i]!, [i]);
      }
    }
    const at = sym.written ?? Infinity;
    let n = 0;
    for (const i of this.twins.get(sym.start) ?? []) {
      if (this.ends[i]! - this.starts[i]! === sym.size && this.written[i]! > fromBytes && this.written[i]! < at) n++;
    }
    return n;
  }

  lookupAt(address: number | bigint, bytes: number): PerfSymbol | undefined {
    const idx = this.segmentOf(address);
    if (idx < 0) return undefined;
    const owner = this.segOwner[idx]!;
    if (owner < 0 || this.written[owner]! <= bytes) return this.symbol(owner);
    const earlier = this.segUnder.get(idx)?.find((e) => this.written[e]! <= bytes);
    return earlier === undefined ? undefined : this.symbol(earlier);
  }

  private segmentOf(address: number | bigint): number {
    const a = typeof address === 'bigint' ? Number(address) : address;
    let lo = 0;
    let hi = this.segStart.length - 1;
    let idx = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (this.segStart[mid]! <= a) {
        idx = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return idx;
  }

  private symbol(owner: number): PerfSymbol | undefined {
    if (owner < 0) return undefined;
    let sym = this.parsed.get(owner);
    if (!sym) {
      const raw = this.raws[owner]!;
      sym = { ...parsePerfName(raw), raw, start: this.starts[owner]!, size: this.ends[owner]! - this.starts[owner]!, written: this.written[owner]! };
      this.parsed.set(owner, sym);
    }
    return sym;
  }
}
