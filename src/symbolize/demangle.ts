/**
 * Symbol demangling: Itanium C++ (`_Z…`) and Rust (legacy `_ZN…17h<hash>E` and v0 `_R…`).
 * Plain C names come back unchanged, and `demangle` never throws.
 *
 * Two engines:
 * - `gecko-profiler-demangle` (Mozilla's WASM build of the cpp_demangle and rustc-demangle
 *   crates). Its `index.js` imports the `.wasm` as an ES module, which Node 20 refuses without a
 *   flag, so the module is compiled and instantiated here synchronously from `index_bg.wasm` on
 *   first use (~10 ms), with the small wasm-bindgen string glue of its `index_bg.js` re-done
 *   below. A trap discards the instance; the next call makes a new one.
 * - A built-in Itanium subset (`demangleBuiltin`): nested and local names, templates, function
 *   parameters, std:: substitutions, operators, constructors and destructors, clone suffixes.
 *   It is used when the WASM engine is unavailable or fails on a `_Z` name; when a name's
 *   parameters do not parse it renders the name with `(...)`.
 *
 * The WASM engine returns the input minus its leading `_` when nothing matched (a Mach-O
 * convention): that result is treated as a failure, so `_start` stays `_start`.
 */
import { appendFileSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

import { cacheFolder } from '../cache-folder.js';

// ---------------------------------------------------------------------------------------------
// Entry point

/** Inputs longer than this are returned unchanged (no real symbol comes close). */
const MAX_INPUT = 1 << 16;
/** The built-in demangler gives up on a type rendered longer than this. */
const MAX_OUTPUT = 1 << 16;

/** Demangled form of a C++ or Rust symbol name; `name` itself when it is not mangled or does
 * not parse. Never throws. */
export function demangle(name: string): string {
  if (typeof name !== 'string' || name.length < 3 || name.length > MAX_INPUT || name.charCodeAt(0) !== 0x5f /* _ */) return name;
  const c = name[1];
  if (c !== 'Z' && c !== 'R') return name;
  const memo = demangled();
  const known = memo.get(name);
  if (known !== undefined) return known;
  const out = demangleUncached(name, c);
  memo.set(name, out);
  if (persistent) fresh.push([name, out]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Names demangled before: `run` names the same few thousand of node's functions every time,
// and their demangling (the WebAssembly engine's start included) is most of its naming of a
// small program. Kept beside the symbol cache (MIMALLOC_PPROF_CACHE_DIR, else
// $XDG_CACHE_HOME/mimalloc-pprof, else ~/.cache/mimalloc-pprof; 'off': none) by
// saveDemangled(), which run calls once it has named its profiles.
//
// The file is a header line, then one `mangled<TAB>demangled` line per name, and grows by
// appends: a save writes only the names new to this process, in one write(2) to a file opened
// O_APPEND, so runs that end together cannot interleave their lines. (V8's C++ names average
// ~500 bytes: rewriting the whole file took ~90 ms of naming tsc, where the new names are a
// few KB.) A line is used only whole: one tab, then its newline; a mangled name never holds a
// tab, and names that would are not kept, so a write cut short (a full disk) after a tab, that
// the next one continued, makes a line of two tabs, which is skipped; cut before its tab, it
// makes one name of two mangled ones, which no symbol has. Past DEMANGLED_MAX_BYTES the file is
// started afresh, atomically, with the most recent half.

const DEMANGLED_HEADER = 'mimalloc-pprof demangled 1\n';
const DEMANGLED_MAX_BYTES = 8 << 20;
let memo: Map<string, string> | undefined;
/** Names demangled in this process and not yet on disk. */
let fresh: [string, string][] = [];
/** The file as read: absent or not this format (written afresh), else its size. */
let onDisk: { size: number } | undefined;
let persistent = false;

/** Reads and keeps the names on disk from now on (run's process; elsewhere in memory only). */
export function persistDemangled(): void {
  persistent = demangledFile() !== undefined; // MIMALLOC_PPROF_CACHE_DIR=off: memory only
}

function demangledFile(): string | undefined {
  const base = cacheFolder();
  return base ? join(base, 'demangled.txt') : undefined;
}

/** Parses the file's lines into `into`; false when it is not this format. */
function parseDemangled(text: string, into: Map<string, string>): boolean {
  if (!text.startsWith(DEMANGLED_HEADER)) return false;
  for (let at = DEMANGLED_HEADER.length; ; ) {
    const end = text.indexOf('\n', at);
    if (end < 0) break; // a last line without its newline: cut short
    const tab = text.indexOf('\t', at);
    if (tab > at && tab < end && text.lastIndexOf('\t', end) === tab) into.set(text.slice(at, tab), text.slice(tab + 1, end));
    at = end + 1;
  }
  return true;
}

function demangled(): Map<string, string> {
  if (memo) return memo;
  memo = new Map();
  const file = persistent ? demangledFile() : undefined;
  if (file) {
    try {
      const text = readFileSync(file, 'utf8');
      if (parseDemangled(text, memo)) onDisk = { size: Buffer.byteLength(text) };
    } catch {
      // none yet, or unreadable: demangled afresh
    }
  }
  return memo;
}

/** A name's line, or '' for a name that a line cannot hold: a tab or newline in either part
 * (a symbol's name is whatever bytes precede its NUL: one with a newline would otherwise write
 * a well-formed line for another name). */
const lineOf = ([mangled, out]: [string, string]): string =>
  /[\t\n]/.test(mangled) || /[\t\n]/.test(out) ? '' : `${mangled}\t${out}\n`;

/** Adds the names demangled in this process to the file (when there are new ones). */
export function saveDemangled(): void {
  const file = persistent ? demangledFile() : undefined;
  if (!file || !memo || fresh.length === 0) return;
  try {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    const added = fresh.map(lineOf).join('');
    if (onDisk !== undefined && onDisk.size + Buffer.byteLength(added) <= DEMANGLED_MAX_BYTES) {
      appendFileSync(file, added, { mode: 0o600 });
      onDisk.size += Buffer.byteLength(added);
    } else {
      // absent, another format, or full: the most recent names, up to half the bound
      const lines: string[] = [];
      let bytes = DEMANGLED_HEADER.length;
      const all = [...memo];
      for (let i = all.length - 1; i >= 0; i--) {
        const line = lineOf(all[i]!);
        bytes += Buffer.byteLength(line);
        if (bytes > DEMANGLED_MAX_BYTES / 2) break;
        lines.push(line);
      }
      const text = DEMANGLED_HEADER + lines.reverse().join('');
      const tmp = `${file}.${process.pid}.tmp`;
      writeFileSync(tmp, text, { mode: 0o600 });
      renameSync(tmp, file);
      onDisk = { size: Buffer.byteLength(text) };
      rmSync(join(dirname(file), 'demangled.json'), { force: true }); // the format before this one
    }
    fresh = [];
  } catch {
    // demangled again next time
  }
}

function demangleUncached(name: string, c: string): string {
  // strip a symbol version (nm prints `name@@VERSION`) and put it back afterwards
  const at = name.indexOf('@');
  const base = at > 0 ? name.slice(0, at) : name;
  const version = at > 0 ? name.slice(at) : '';
  // The built-in parse runs first (~10 µs) because it notices renderings that grow without
  // bound (substitutions nest exponentially); cpp_demangle has no output limit.
  const builtin = c === 'Z' ? parseBuiltin(base) : undefined;
  if (builtin?.status === 'overflow') return name;
  const wasm = wasmDemangle(base);
  if (wasm !== undefined) return gnuStyle(wasm) + version;
  if (builtin && builtin.status !== 'none') return builtin.text + version;
  return name;
}

/** cpp_demangle's special names in c++filt's wording (thunks are FUNC symbols). */
function gnuStyle(s: string): string {
  if (s[0] !== '{') return s;
  let m = /^\{virtual override thunk\(\{offset\(-?\d+\)\}, (.*)\)\}$/s.exec(s);
  if (m) return `non-virtual thunk to ${m[1]}`;
  m = /^\{virtual override thunk\(\{virtual offset\([^)]*\)\}, (.*)\)\}$/s.exec(s);
  if (m) return `virtual thunk to ${m[1]}`;
  m = /^\{(vtable|vtt)\((.*)\)\}$/s.exec(s);
  if (m) return `${m[1] === 'vtt' ? 'VTT' : 'vtable'} for ${m[2]}`;
  return s;
}

/** Which engine `demangle` uses first: 'wasm' once the WASM module loaded, else 'builtin'. */
export function demanglerEngine(): 'wasm' | 'builtin' {
  return loadWasm() ? 'wasm' : 'builtin';
}

// ---------------------------------------------------------------------------------------------
// WASM engine

interface WasmExports {
  memory: WebAssembly.Memory;
  demangle_any(ptr: number, len: number): [number, number];
  __wbindgen_malloc(size: number, align: number): number;
  __wbindgen_free(ptr: number, size: number, align: number): void;
  __wbindgen_start(): void;
  __wbindgen_export_0?: WebAssembly.Table;
}

let wasmModule: WebAssembly.Module | null | undefined; // null: unavailable
let wasm: WasmExports | undefined;
const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: false });

function loadWasm(): WasmExports | undefined {
  if (wasm) return wasm;
  if (wasmModule === null) return undefined;
  try {
    if (wasmModule === undefined) {
      const file = createRequire(import.meta.url).resolve('gecko-profiler-demangle/index_bg.wasm');
      wasmModule = new WebAssembly.Module(readFileSync(file));
    }
    let exports: WasmExports | undefined;
    const imports: Record<string, Record<string, () => void>> = {};
    for (const imp of WebAssembly.Module.imports(wasmModule)) {
      if (imp.kind !== 'function' || imp.name !== '__wbindgen_init_externref_table') throw new Error(`unexpected import ${imp.module}.${imp.name}`);
      (imports[imp.module] ??= {})[imp.name] = () => {
        // as wasm-bindgen 0.2.100's glue: reserve the externref table's well-known slots
        const table = exports?.__wbindgen_export_0;
        if (!table) return;
        const offset = table.grow(4);
        table.set(0, undefined);
        table.set(offset + 0, undefined);
        table.set(offset + 1, null);
        table.set(offset + 2, true);
        table.set(offset + 3, false);
      };
    }
    const instance = new WebAssembly.Instance(wasmModule, imports);
    const ex = instance.exports as unknown as WasmExports;
    for (const f of ['demangle_any', '__wbindgen_malloc', '__wbindgen_free', '__wbindgen_start'] as const) {
      if (typeof ex[f] !== 'function') throw new Error(`missing export ${f}`);
    }
    if (!(ex.memory instanceof WebAssembly.Memory)) throw new Error('missing memory');
    exports = ex;
    ex.__wbindgen_start();
    wasm = ex;
    return wasm;
  } catch {
    wasmModule = null;
    return undefined;
  }
}

/** The WASM engine's result, or undefined when it is unavailable or did not demangle `name`. */
function wasmDemangle(name: string): string | undefined {
  const w = loadWasm();
  if (!w) return undefined;
  let out: string;
  try {
    const bytes = encoder.encode(name);
    const ptr = w.__wbindgen_malloc(bytes.length, 1) >>> 0;
    new Uint8Array(w.memory.buffer, ptr, bytes.length).set(bytes); // takes ownership of ptr
    const ret = w.demangle_any(ptr, bytes.length);
    const rptr = ret[0] >>> 0;
    const rlen = ret[1] >>> 0;
    out = decoder.decode(new Uint8Array(w.memory.buffer, rptr, rlen));
    w.__wbindgen_free(rptr, rlen, 1);
  } catch {
    wasm = undefined; // a trap may leave the instance inconsistent: start a fresh one next time
    return undefined;
  }
  if (out === '' || out === name || out === name.slice(1)) return undefined;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Built-in Itanium subset

class Fail extends Error {}

const BUILTIN: Record<string, string> = {
  v: 'void', w: 'wchar_t', b: 'bool', c: 'char', a: 'signed char', h: 'unsigned char', s: 'short',
  t: 'unsigned short', i: 'int', j: 'unsigned int', l: 'long', m: 'unsigned long', x: 'long long',
  y: 'unsigned long long', n: '__int128', o: 'unsigned __int128', f: 'float', d: 'double',
  e: 'long double', g: '__float128', z: '...',
};
const BUILTIN_D: Record<string, string> = {
  n: 'decltype(nullptr)', i: 'char32_t', s: 'char16_t', u: 'char8_t', a: 'auto', c: 'decltype(auto)', h: 'half',
};
const OPERATORS: Record<string, string> = {
  nw: 'new', na: 'new[]', dl: 'delete', da: 'delete[]', ps: '+', ng: '-', ad: '&', de: '*', co: '~',
  pl: '+', mi: '-', ml: '*', dv: '/', rm: '%', an: '&', or: '|', eo: '^', aS: '=', pL: '+=', mI: '-=',
  mL: '*=', dV: '/=', rM: '%=', aN: '&=', oR: '|=', eO: '^=', ls: '<<', rs: '>>', lS: '<<=', rS: '>>=',
  eq: '==', ne: '!=', lt: '<', gt: '>', le: '<=', ge: '>=', ss: '<=>', nt: '!', aa: '&&', oo: '||',
  pp: '++', mm: '--', cm: ',', pm: '->*', pt: '->', cl: '()', ix: '[]', qu: '?',
};
const STD_SUBS: Record<string, string> = {
  a: 'std::allocator', b: 'std::basic_string',
  s: 'std::string', i: 'std::istream', o: 'std::ostream', d: 'std::iostream',
};
const SPECIAL: Record<string, string> = { V: 'vtable for ', I: 'typeinfo for ', S: 'typeinfo name for ', T: 'VTT for ' };

/** A parsed name: its rendering, the last component (for constructors), whether it ends in
 * template arguments (then a function's first parameter type is its return type). */
interface Name {
  text: string;
  last: string;
  templated: boolean;
  cv: string; // method qualifiers (" const" …)
}

class Parser {
  pos = 0;
  subs: string[] = [];
  templateArgs: string[] = [];
  private depth = 0;

  constructor(readonly s: string) {}

  peek(k = 0): string {
    return this.s[this.pos + k] ?? '';
  }
  eat(t: string): boolean {
    if (this.s.startsWith(t, this.pos)) {
      this.pos += t.length;
      return true;
    }
    return false;
  }
  expect(t: string): void {
    if (!this.eat(t)) throw new Fail();
  }
  enter(): void {
    if (++this.depth > 256) throw new Fail();
  }
  leave(): void {
    this.depth--;
  }

  number(): number {
    const m = /^n?\d+/.exec(this.s.slice(this.pos, this.pos + 12));
    if (!m) throw new Fail();
    this.pos += m[0].length;
    return m[0].startsWith('n') ? -Number(m[0].slice(1)) : Number(m[0]);
  }

  sourceName(): string {
    const n = this.number();
    if (n <= 0 || this.pos + n > this.s.length) throw new Fail();
    const id = this.s.slice(this.pos, this.pos + n);
    this.pos += n;
    return id.startsWith('_GLOBAL__N') ? '(anonymous namespace)' : id;
  }

  /** seq-id in base 36 followed by `_`; S_ is 0, S0_ is 1. */
  substitution(): string {
    this.expect('S');
    const c = this.peek();
    if (Object.hasOwn(STD_SUBS, c)) {
      this.pos++;
      return STD_SUBS[c]!;
    }
    let idx = 0;
    if (!this.eat('_')) {
      const m = /^[0-9A-Z]+/.exec(this.s.slice(this.pos, this.pos + 8));
      if (!m) throw new Fail();
      this.pos += m[0].length;
      idx = parseInt(m[0], 36) + 1;
      this.expect('_');
    }
    const sub = this.subs[idx];
    if (sub === undefined) throw new Fail();
    return sub;
  }

  templateParam(): string {
    this.expect('T');
    let idx = 0;
    if (!this.eat('_')) {
      idx = this.number() + 1;
      this.expect('_');
    }
    const a = this.templateArgs[idx];
    if (a === undefined) throw new Fail();
    const pack = this.packs.get(a);
    if (pack && this.expansion !== undefined) {
      this.expansion = pack;
      return pack[this.packIndex] ?? '';
    }
    return a;
  }

  templateArgList(): string[] {
    this.expect('I');
    const args: string[] = [];
    while (!this.eat('E')) {
      if (this.pos >= this.s.length) throw new Fail();
      args.push(this.templateArg());
    }
    return args;
  }

  templateArg(): string {
    if (this.peek() === 'L') return this.literal();
    if (this.eat('XadL_Z')) {
      // the only expression supported: the address of an entity, &name
      this.encoding();
      this.expect('EE');
      return `&${this.encodedName}`;
    }
    if (this.eat('J')) {
      const pack: string[] = [];
      while (!this.eat('E')) {
        if (this.pos >= this.s.length) throw new Fail();
        pack.push(this.templateArg());
      }
      const text = pack.join(', ');
      this.packs.set(text, pack);
      return text;
    }
    return this.type();
  }

  literal(): string {
    this.expect('L');
    if (this.eat('_Z')) {
      const e = this.encoding();
      this.expect('E');
      return e;
    }
    const c = this.peek();
    let type: string;
    if (Object.hasOwn(BUILTIN, c)) {
      this.pos++;
      type = BUILTIN[c]!;
    } else type = this.type();
    const end = this.s.indexOf('E', this.pos);
    if (end < 0) throw new Fail();
    let v = this.s.slice(this.pos, end);
    this.pos = end + 1;
    if (v.startsWith('n')) v = `-${v.slice(1)}`;
    if (type === 'bool') return v === '0' ? 'false' : 'true';
    if (type === 'int') return v;
    if (type === 'unsigned int') return `${v}u`;
    if (type === 'long') return `${v}l`;
    if (type === 'unsigned long') return `${v}ul`;
    return `(${type})${v}`;
  }

  unqualifiedName(prev: string): { text: string; ctor: boolean } {
    const c = this.peek();
    if (c >= '0' && c <= '9') return { text: this.sourceName(), ctor: false };
    if (c === 'C' && /[1-5I]/.test(this.peek(1))) {
      this.pos += this.peek(1) === 'I' ? 3 : 2;
      if (this.s[this.pos - 2] === 'I') this.type(); // inheriting constructor's base
      return { text: baseName(prev), ctor: true };
    }
    if (c === 'D' && /[0-5]/.test(this.peek(1))) {
      this.pos += 2;
      return { text: `~${baseName(prev)}`, ctor: true };
    }
    if (c === 'L') {
      // internal-linkage name: L <source-name> [discriminator]
      this.pos++;
      return this.unqualifiedName(prev);
    }
    if (c === 'U' && this.peek(1) === 't') {
      this.pos += 2;
      const n = this.peek() === '_' ? 1 : this.number() + 2;
      this.expect('_');
      return { text: `{unnamed type#${n}}`, ctor: false };
    }
    if (c === 'U' && this.peek(1) === 'l') {
      this.pos += 2;
      const params: string[] = [];
      while (!this.eat('E')) {
        if (this.pos >= this.s.length) throw new Fail();
        params.push(this.type());
      }
      const n = this.peek() === '_' ? 1 : this.number() + 2;
      this.expect('_');
      return { text: `{lambda(${params.filter((p) => p !== 'void').join(', ')})#${n}}`, ctor: false };
    }
    const two = this.s.slice(this.pos, this.pos + 2);
    if (two === 'cv') {
      this.pos += 2;
      return { text: `operator ${this.type()}`, ctor: true };
    }
    if (two === 'li') {
      this.pos += 2;
      return { text: `operator"" ${this.sourceName()}`, ctor: false };
    }
    if (Object.hasOwn(OPERATORS, two)) {
      this.pos += 2;
      const op = OPERATORS[two]!;
      return { text: /^[a-z]/.test(op) ? `operator ${op}` : `operator${op}`, ctor: false };
    }
    throw new Fail();
  }

  abiTags(text: string): string {
    while (this.peek() === 'B') {
      this.pos++;
      text += `[abi:${this.sourceName()}]`;
    }
    return text;
  }

  /** <name>; `asType` adds the complete name as a substitution (class types). */
  name(asType: boolean): Name {
    this.enter();
    try {
      if (this.eat('N')) return this.nested(asType);
      if (this.peek() === 'Z') {
        const l = this.local();
        if (asType) this.subs.push(l.text);
        return l;
      }
      let text: string;
      let ctor = false;
      let fromSub = false;
      if (this.peek() === 'S' && this.peek(1) !== 't') {
        text = this.substitution();
        fromSub = true;
        // a substitution alone is a complete name and is not added again
        if (this.peek() !== 'I') return { text, last: text, templated: false, cv: '' };
      } else {
        const std = this.eat('St');
        const u = this.unqualifiedName('');
        ctor = u.ctor;
        text = this.abiTags((std ? 'std::' : '') + u.text);
      }
      if (this.peek() === 'I') {
        if (!fromSub) this.subs.push(text); // the template name
        const args = this.templateArgList();
        if (!asType) this.templateArgs = args;
        text = text + targs(args);
        if (asType) this.subs.push(text);
        return { text, last: text, templated: !ctor, cv: '' };
      }
      if (asType) this.subs.push(text);
      return { text, last: text, templated: false, cv: '' };
    } finally {
      this.leave();
    }
  }

  nested(asType: boolean): Name {
    let cv = '';
    for (;;) {
      if (this.eat('r')) cv += ' restrict';
      else if (this.eat('V')) cv += ' volatile';
      else if (this.eat('K')) cv += ' const';
      else break;
    }
    cv = cv.split(' ').reverse().join(' ').trim();
    cv = cv ? ` ${cv}` : '';
    if (this.eat('R')) cv += ' &';
    else if (this.eat('O')) cv += ' &&';
    let text = '';
    let last = '';
    let templated = false;
    let ctorLast = false;
    let first = true;
    while (!this.eat('E')) {
      if (this.pos >= this.s.length) throw new Fail();
      const c = this.peek();
      if (c === 'I') {
        if (first) throw new Fail();
        const args = this.templateArgList();
        if (!asType) this.templateArgs = args;
        text += targs(args);
        last += targs(args);
        templated = !ctorLast;
      } else if (c === 'S' && first && this.peek(1) !== 't') {
        text = this.substitution();
        last = text;
        first = false;
        continue; // already a substitution: not added again
      } else if (c === 'T') {
        text = this.templateParam();
        last = text;
        templated = false;
      } else if (c === 'S' && this.peek(1) === 't' && first) {
        this.pos += 2;
        const u = this.unqualifiedName('');
        last = this.abiTags(u.text);
        text = `std::${last}`;
        templated = false;
      } else if (c === 'M') {
        this.pos++; // data-member-prefix closure marker
        continue;
      } else {
        const u = this.unqualifiedName(last);
        const part = this.abiTags(u.text);
        text = text ? `${text}::${part}` : part;
        last = part;
        templated = false;
        ctorLast = u.ctor;
      }
      first = false;
      // every prefix is a candidate; the complete name only when it names a type
      if (this.peek() !== 'E' || asType) this.subs.push(text);
    }
    return { text, last, templated, cv };
  }

  local(): Name {
    this.expect('Z');
    const enc = this.encoding();
    this.expect('E');
    let text: string;
    let cv = '';
    let templated = false;
    if (this.eat('s')) text = `${enc}::string literal`;
    else {
      const inner = this.name(false);
      text = `${enc}::${inner.text}`;
      cv = inner.cv;
      templated = inner.templated;
    }
    if (this.eat('_')) {
      if (this.eat('_')) {
        this.number();
        this.expect('_');
      } else this.number();
    }
    return { text, last: text, templated, cv };
  }

  /** <type>: returns its rendering and records substitutions. */
  type(): string {
    this.enter();
    try {
      const t = this.typeInner();
      if (t.length > MAX_OUTPUT) {
        this.overflow = true; // substitutions can make renderings grow exponentially
        throw new Fail();
      }
      return t;
    } finally {
      this.leave();
    }
  }

  private typeInner(): string {
    const c = this.peek();
    if (Object.hasOwn(BUILTIN, c)) {
      this.pos++;
      return BUILTIN[c]!;
    }
    if (c === 'D' && Object.hasOwn(BUILTIN_D, this.peek(1))) {
      this.pos += 2;
      return BUILTIN_D[this.s[this.pos - 1]!]!;
    }
    if (c === 'D' && this.peek(1) === 'p') {
      // pack expansion: the pattern once per element of the pack it mentions
      // (rendered once per element; substitutions are recorded by the first pass only)
      this.pos += 2;
      const at = this.pos;
      const outer = [this.expansion, this.packIndex] as const;
      this.expansion = null;
      this.packIndex = 0;
      try {
        let t = this.type();
        const pack = this.expansion as string[] | null;
        if (pack) {
          const end = this.pos;
          const parts = pack.length > 0 ? [t] : [];
          for (let k = 1; k < pack.length; k++) {
            const subs = this.subs.slice();
            this.pos = at;
            this.packIndex = k;
            parts.push(this.type());
            this.subs = subs;
          }
          this.pos = end;
          t = parts.join(', ');
        }
        this.subs.push(t);
        return t;
      } finally {
        [this.expansion, this.packIndex] = outer;
      }
    }
    if (c === 'u') {
      this.pos++;
      return this.sourceName();
    }
    let t: string;
    if (c === 'r' || c === 'V' || c === 'K') {
      let q = '';
      for (;;) {
        if (this.eat('r')) q = ` restrict${q}`;
        else if (this.eat('V')) q = ` volatile${q}`;
        else if (this.eat('K')) q = ` const${q}`;
        else break;
      }
      const inner = this.type();
      // a qualifier the type (a template parameter) already has is not repeated
      const has = /(?: (?:const|volatile|restrict))+$/.exec(inner)?.[0] ?? '';
      q = q
        .split(' ')
        .filter((w) => w && !has.includes(` ${w}`))
        .map((w) => ` ${w}`)
        .join('');
      const arr = this.arrayTypes.get(inner);
      if (arr) {
        // qualifiers of an array type belong to its elements
        t = `${arr[0]}${q} [${arr[1]}]`;
        this.arrayTypes.set(t, [`${arr[0]}${q}`, arr[1]]);
      } else t = `${inner}${q}`;
    } else if (c === 'P' || c === 'R' || c === 'O') {
      this.pos++;
      const inner = this.type();
      const sym = c === 'P' ? '*' : c === 'R' ? '&' : '&&';
      const ref = this.refs.get(inner);
      if (ref && sym !== '*') {
        // reference collapsing: T& &, T& &&, T&& & are T&; T&& && is T&&
        if (ref === '&' || sym === '&&') return inner;
        return inner.endsWith('&&') ? inner.slice(0, -1) : inner.replace('(&&)', '(&)');
      }
      const fn = this.functionTypes.get(inner);
      const arr = this.arrayTypes.get(inner);
      t = fn ? `${fn[0]} (${sym})(${fn[1]})` : arr ? `${arr[0]} (${sym}) [${arr[1]}]` : `${inner}${sym}`;
      if (sym !== '*') this.refs.set(t, sym as '&' | '&&');
    } else if (c === 'F') {
      this.pos++;
      this.eat('Y');
      const ret = this.type();
      const params: string[] = [];
      while (!this.eat('E')) {
        if (this.pos >= this.s.length) throw new Fail();
        if ((this.peek() === 'R' || this.peek() === 'O') && this.peek(1) === 'E') {
          this.pos++; // ref-qualifier of the function type
          continue;
        }
        params.push(this.type());
      }
      t = `${ret} (${renderParams(params)})`;
      this.functionTypes.set(t, [ret, renderParams(params)]);
      this.subs.push(t);
      return t;
    } else if (c === 'A') {
      this.pos++;
      let dim = '';
      if (this.peek() !== '_') dim = String(this.number());
      this.expect('_');
      const elem = this.type();
      t = `${elem} [${dim}]`;
      this.arrayTypes.set(t, [elem, dim]);
    } else if (c === 'M') {
      this.pos++;
      const cls = this.type();
      const member = this.type();
      const fn = this.functionTypes.get(member);
      t = fn ? `${fn[0]} (${cls}::*)(${fn[1]})` : `${member} ${cls}::*`;
    } else if (c === 'T') {
      t = this.templateParam();
      this.subs.push(t);
      if (this.peek() === 'I') {
        const args = this.templateArgList();
        t += targs(args);
      } else return t;
    } else if (c === 'S' && this.peek(1) !== 't') {
      t = this.substitution();
      if (this.peek() !== 'I') return t;
      const args = this.templateArgList();
      t += targs(args);
    } else if (c === 'N' || c === 'Z' || (c >= '0' && c <= '9') || (c === 'S' && this.peek(1) === 't')) {
      return this.name(true).text;
    } else if (c === 'D' && (this.peek(1) === 't' || this.peek(1) === 'T')) {
      throw new Fail(); // decltype(expression): not supported
    } else throw new Fail();
    this.subs.push(t);
    return t;
  }

  /** Renderings of parameter packs (`J…E`) to their elements, for `Dp` expansions. */
  private readonly packs = new Map<string, string[]>();
  /** Inside a `Dp` pattern: null until it mentions a pack, then that pack; undefined outside. */
  private expansion: string[] | null | undefined;
  private packIndex = 0;
  /** Renderings of reference types and their kind, for reference collapsing. */
  private readonly refs = new Map<string, '&' | '&&'>();
  /** Renderings of function types, so that pointers to them read `ret (*)(params)`. */
  private readonly functionTypes = new Map<string, [string, string]>();
  private readonly arrayTypes = new Map<string, [string, string]>();

  /** <encoding>: a function name with parameters, or a data name. */
  encoding(): string {
    if (this.peek() === 'T' || (this.peek() === 'G' && this.peek(1) === 'V')) return this.specialName();
    const n = this.name(false);
    this.encodedName = n.text;
    if (this.pos >= this.s.length || this.peek() === 'E' || this.peek() === '.') return n.text + n.cv;
    const start = this.pos;
    try {
      if (n.templated) this.type(); // return type of a function template
      const params: string[] = [];
      while (this.pos < this.s.length && this.peek() !== 'E' && this.peek() !== '.') params.push(this.type());
      if (params.length === 0) throw new Fail();
      return `${n.text}(${renderParams(params)})${n.cv}`;
    } catch (e) {
      if (!(e instanceof Fail)) throw e;
      this.pos = start;
      this.partial = true;
      return `${n.text}(...)${n.cv}`;
    }
  }

  partial = false;
  overflow = false;
  /** The name (without parameters) of the last encoding parsed. */
  private encodedName = '';

  specialName(): string {
    if (this.eat('GV')) return `guard variable for ${this.name(false).text}`;
    this.expect('T');
    const c = this.peek();
    if (Object.hasOwn(SPECIAL, c)) {
      this.pos++;
      return SPECIAL[c]! + this.type();
    }
    if (c === 'h' || c === 'v') {
      this.pos++;
      this.number();
      this.expect('_');
      if (c === 'v') {
        this.number();
        this.expect('_');
      }
      return `${c === 'h' ? 'non-virtual' : 'virtual'} thunk to ${this.encoding()}`;
    }
    throw new Fail();
  }
}

/** A constructor's name: the enclosing class's last component without template arguments. */
function baseName(prev: string): string {
  let depth = 0;
  let end = prev.length;
  for (let i = prev.length - 1; i >= 0; i--) {
    const ch = prev[i];
    if (ch === '>') depth++;
    else if (ch === '<' && --depth === 0) end = i;
    else if (depth === 0 && ch === ':' && prev[i - 1] === ':') return prev.slice(i + 1, end);
  }
  return prev.slice(0, end);
}

function targs(args: string[]): string {
  return `<${args.filter((a) => a !== '').join(', ')}>`;
}

function renderParams(params: string[]): string {
  return params.length === 1 && params[0] === 'void' ? '' : params.filter((p) => p !== '').join(', ');
}

const RUST_HASH = /::h[0-9a-f]{16}$/;
const RUST_ESCAPES: Record<string, string> = {
  SP: '@', BP: '*', RF: '&', LT: '<', GT: '>', LP: '(', RP: ')', C: ',',
};

function rustLegacy(s: string): string {
  return s
    .replace(RUST_HASH, '')
    .replace(/\$([A-Z]{1,2}|u[0-9a-f]{2,6})\$/g, (m, e: string) =>
      e.startsWith('u') ? String.fromCodePoint(parseInt(e.slice(1), 16)) : (RUST_ESCAPES[e] ?? m),
    )
    .replace(/\.\./g, '::');
}

/**
 * The built-in Itanium demangler (a subset; see the file comment). Returns `name` unchanged
 * when it does not parse; a name whose parameters do not parse is rendered as `name(...)`.
 */
export function demangleBuiltin(name: string): string {
  const r = parseBuiltin(name);
  return r.status === 'ok' || r.status === 'partial' ? r.text : name;
}

function parseBuiltin(name: string): { text: string; status: 'ok' | 'partial' | 'none' | 'overflow' } {
  if (!name.startsWith('_Z') || name.length > MAX_INPUT) return { text: name, status: 'none' };
  const p = new Parser(name);
  try {
    p.pos = 2;
    let out = p.encoding();
    if (p.pos < name.length) {
      const rest = name.slice(p.pos);
      if (/^(\.[A-Za-z_]\w*(\.\d+)*)+$/.test(rest)) {
        out += rest
          .split(/(?=\.[A-Za-z_])/)
          .map((x) => ` [clone ${x}]`)
          .join('');
      } else if (!p.partial) return { text: name, status: 'none' };
    }
    if (RUST_HASH.test(out) && name.startsWith('_ZN')) out = rustLegacy(out);
    return { text: out, status: p.overflow ? 'overflow' : p.partial ? 'partial' : 'ok' };
  } catch {
    return { text: name, status: p.overflow ? 'overflow' : 'none' };
  }
}
