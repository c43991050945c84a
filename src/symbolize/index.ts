/**
 * Names the frames of a raw profile from the preload library, in-process and without
 * binutils: native frames from the ELF symbol tables of the mapped files, JavaScript frames
 * (JIT and, with --interpreted-frames-native-stack, interpreted ones) from V8's perf map.
 * The result is self-contained: locations carry function names (and file:line for
 * JavaScript), every mapping whose frames were named is marked has_functions, and raw
 * addresses are kept. Frames of the preload library itself (its thread-start trampoline)
 * are trimmed, and each sample's `thread` label names the kind of thread that allocated.
 */
import { basename, join } from 'node:path';

import { Function as ProfileFunction, Label, Line, Location, Mapping, type Profile } from '../profile/pprof.js';

import { CodeCopyIndex, codeCopiesOf, type CodeCopy } from './code-copies.js';
import { demangle } from './demangle.js';
import { readElf, type ElfFile, type ElfSymbolizer } from './elf.js';
import { readPerfMap, type PerfMap, type PerfSymbol } from './perfmap.js';
import { classifyThread } from './threads.js';
import type { InlinedFunction, V8CodeLog } from './v8-log.js';

export interface SymbolizeOptions {
  /** The process the profile came from: its main thread is labelled `main`. */
  pid?: number;
  /** V8's perf map of that process (`/tmp/perf-<pid>.map`), when it ran with --perf-basic-prof. */
  perfMapPath?: string;
  /** Only the perf map's first bytes: its size when the profile was taken. */
  perfMapBytes?: number;
  /** Mapped files whose frames are dropped from every stack (the preload library). */
  trimFile?: (filename: string) => boolean;
  /** Executable code outside the profile's mappings (V8's copy of its embedded builtins):
   * see code-copies.ts. By default, when `pid` is this process, read from /proc/self. */
  codeCopies?: readonly CodeCopy[];
  /** V8's code log of that process (v8-log.ts): the functions inlined into optimised code
   * become frames of their own, innermost first, in the caller's location. */
  v8Log?: V8CodeLog;
  /** How far the perf map had been written when the log started (v8-log-start.cts). */
  v8LogFrom?: number;
  /** Folders that hold the process's files under their own paths (a container's root, an
   * emulator's -L prefix), searched before the path itself; the file whose build ID is the
   * recorded one is used. Default: MIMALLOC_PPROF_SYSROOT, colon-separated. */
  sysroots?: readonly string[];
}

export interface SymbolizeResult {
  profile: Profile;
  /** Locations named from ELF symbols, from the perf map, by their file alone (a stripped
   * object: `[libvips-cpp.so.8.18.7]`), and left as addresses. */
  counts: { native: number; javascript: number; byFile: number; unnamed: number };
}

const num = (v: number | bigint | undefined): number => (v === undefined ? 0 : Number(v));

export function symbolize(profile: Profile, options: SymbolizeOptions = {}): SymbolizeResult {
  const strings = profile.stringTable;
  const str = (i: number | bigint) => strings.strings[Number(i)] ?? '';
  // A file that cannot be read or parsed (gone, not ELF, corrupt) leaves its frames unnamed.
  const symbolizers = new Map<string, { elf: ElfFile; symbols: ElfSymbolizer } | null>();
  const elfOf = (file: string) => {
    if (!symbolizers.has(file)) {
      try {
        const elf = readElf(file);
        symbolizers.set(file, { elf, symbols: elf.symbolizer() });
      } catch {
        symbolizers.set(file, null);
      }
    }
    return symbolizers.get(file) ?? null;
  };
  const sysroots = options.sysroots ?? (process.env.MIMALLOC_PPROF_SYSROOT ?? '').split(':').filter((d) => d !== '');
  // The file the process mapped: under a sysroot, or at its path; one with another build ID
  // (rebuilt or replaced since the dump, or another machine's) is not it.
  const mappedFiles = new Map<string, { elf: ElfFile; symbols: ElfSymbolizer } | null>();
  const mappedFileOf = (file: string, buildId: string) => {
    const key = `${file}\0${buildId}`;
    if (!mappedFiles.has(key)) {
      const candidates = [...sysroots.map((root) => join(root, file)), file].map(elfOf).filter((e) => e !== null);
      // the one with the recorded build ID; else, where either side has none, the first (a
      // sysroot's before the path itself)
      const same = (e: { elf: ElfFile }) => buildId !== '' && e.elf.buildId.toLowerCase() === buildId.toLowerCase();
      const found = candidates.find(same) ?? candidates.find((e) => buildId === '' || e.elf.buildId === '') ?? null;
      mappedFiles.set(key, found);
    }
    return mappedFiles.get(key) ?? null;
  };
  const debugFiles = new Map<string, { elf: ElfFile; symbols: ElfSymbolizer } | null>();
  const debugFileOf = (elf: ElfFile) => {
    if (elf.buildId.length < 4) return null;
    if (!debugFiles.has(elf.buildId)) {
      const path = `/usr/lib/debug/.build-id/${elf.buildId.slice(0, 2)}/${elf.buildId.slice(2)}.debug`;
      try {
        const dbg = readElf(path);
        debugFiles.set(elf.buildId, dbg.buildId === elf.buildId ? { elf: dbg, symbols: dbg.symbolizer() } : null);
      } catch {
        debugFiles.set(elf.buildId, null);
      }
    }
    return debugFiles.get(elf.buildId) ?? null;
  };
  let perfMap: PerfMap | undefined;
  if (options.perfMapPath) {
    try {
      perfMap = readPerfMap(options.perfMapPath, options.perfMapBytes);
    } catch {
      perfMap = undefined;
    }
  }

  const mappings = new Map<number, Mapping>(profile.mapping.map((m) => [num(m.id), m]));
  // MIMALLOC_PPROF_TEST_NO_CODE_COPIES=1: the tests' control (test/symbolize/unnamed.test.ts)
  // leaves V8's copy of its builtins unnamed, by the copy and (Node 22 on) by the perf map
  const noCopies = process.env.MIMALLOC_PPROF_TEST_NO_CODE_COPIES === '1';
  const copies = new CodeCopyIndex(
    noCopies ? [] : (options.codeCopies ?? (options.pid !== undefined && options.pid === process.pid ? codeCopiesOf('self') : [])),
  );
  // one mapping per copy whose frames were named (pprof then leaves them alone)
  const copyMappings = new Map<CodeCopy, Mapping>();
  let nextMappingId = profile.mapping.reduce((a, m) => Math.max(a, num(m.id)), 0) + 1;
  const functions = new Map<string, ProfileFunction>();
  let nextFunctionId = profile.function.reduce((a, f) => Math.max(a, num(f.id)), 0) + 1;
  const functionFor = (name: string, systemName: string, filename: string, startLine = 0): ProfileFunction => {
    const key = `${name}\0${systemName}\0${filename}`;
    let f = functions.get(key);
    if (!f) {
      f = new ProfileFunction({
        id: nextFunctionId++,
        name: strings.dedup(name),
        systemName: strings.dedup(systemName),
        filename: strings.dedup(filename),
        startLine,
      });
      functions.set(key, f);
      profile.function.push(f);
      functionById.set(num(f.id), f);
    }
    return f;
  };
  const functionById = new Map<number, ProfileFunction>();
  for (const f of profile.function) if (!functionById.has(num(f.id))) functionById.set(num(f.id), f); // the first of an id, as find() gave
  const nameOfFunction = (id: number | bigint) => str(functionById.get(num(id))?.name ?? 0);
  // MIMALLOC_PPROF_TEST_NO_INLINE=1: the tests' control (test/symbolize/inlined.test.ts)
  const v8Log = process.env.MIMALLOC_PPROF_TEST_NO_INLINE === '1' ? undefined : options.v8Log;
  /** The functions the JIT inlined at `address` in `js`'s optimised code, innermost first. */
  const inlinedAt = (js: PerfSymbol, address: number): InlinedFunction[] => {
    if (!v8Log || js.kind !== 'optimized' || js.tag !== 'JS') return [];
    if (options.v8LogFrom !== undefined && (js.written ?? 0) <= options.v8LogFrom) return []; // made before the log started
    const tier = /^JS:(o?[*+]'?)/.exec(js.raw)?.[1] ?? '';
    const nth = options.v8LogFrom !== undefined && perfMap ? perfMap.twinsBefore(js, options.v8LogFrom) : -1;
    return v8Log.inlinedAt(js.start, js.size, js.raw.slice(3 + tier.length), address, nth);
  };
  // the inlined functions first (pprof's order), each as the function it is; the code object's
  // own function, whose code it is, last
  const jsLine = (js: PerfSymbol, address: number): Line[] => {
    const tier = /^JS:(o?[*+]'?)/.exec(js.raw)?.[1] ?? '';
    return [
      ...inlinedAt(js, address).map(
        (f) => new Line({ functionId: functionFor(f.name, `JS:${tier}${f.raw}`, f.file, f.line).id, line: f.line, column: f.column }),
      ),
      new Line({ functionId: functionFor(js.name, js.raw, js.file, js.line).id, line: js.line, column: js.column }),
    ];
  };
  const jsNames = (lines: Line[]): string[] => lines.map((l) => nameOfFunction(l.functionId));
  // the preload library's label of when each sample's stack was taken (native/src/jitmap.c)
  const jitKey = profile.stringTable.strings.indexOf('jit_map_bytes');

  const counts = { native: 0, javascript: 0, byFile: 0, unnamed: 0 };
  const trimmed = new Set<number>();
  const namedInMapping = new Map<number, number>();
  let jitLo = Infinity;
  let jitHi = 0;
  const jitLocations: Location[] = [];
  const nameOfLocation = new Map<number, string[]>();

  for (const loc of profile.location) {
    const address = num(loc.address);
    const mapping = mappings.get(num(loc.mappingId));
    if (loc.line.length > 0) {
      nameOfLocation.set(num(loc.id), loc.line.map((l) => nameOfFunction(l.functionId)));
      continue; // already symbolised
    }
    // the address lies in code of the mapping's file, the one the process had (build ID)
    let inFileCode = false;
    if (mapping) {
      const file = str(mapping.filename);
      const trim = options.trimFile?.(file) ?? false;
      const elf = file ? mappedFileOf(file, str(mapping.buildId)) : null;

      const vaddr = elf ? elf.elf.runtimeToVaddr(address, num(mapping.memoryStart), num(mapping.fileOffset)) : undefined;
      inFileCode = vaddr !== undefined && elf!.elf.loadSegments.some((g) => (g.flags & 1) !== 0 && vaddr >= g.vaddr && vaddr < g.vaddr + g.filesz); // PF_X
      const sym = elf && vaddr !== undefined ? elf.symbols.lookup(vaddr) : undefined;
      if (trim && sym?.name !== QUEUED_BY_SYMBOL) {
        trimmed.add(num(loc.id));
        continue;
      }
      // a stripped file's local functions (libc's __libc_start_call_main): its separate debug
      // file, found by build ID, where one is installed (libc6-dbg, *-dbgsym)
      const debugSym = elf && !sym && vaddr !== undefined ? debugFileOf(elf.elf)?.symbols.lookup(vaddr) : undefined;
      if (elf && debugSym) {
        const name = demangle(debugSym.name);
        loc.line = [new Line({ functionId: functionFor(name, debugSym.name, file).id, line: 0 })];
        namedInMapping.set(num(mapping!.id), (namedInMapping.get(num(mapping!.id)) ?? 0) + 1);
        nameOfLocation.set(num(loc.id), [name]);
        counts.native++;
        continue;
      }
      if (elf) {
        if (sym) {
          const name = sym.name === QUEUED_BY_SYMBOL ? QUEUED_BY : demangle(sym.name);
          loc.line = [new Line({ functionId: functionFor(name, sym.name, file).id, line: 0 })];
          namedInMapping.set(num(mapping.id), (namedInMapping.get(num(mapping.id)) ?? 0) + 1);
          nameOfLocation.set(num(loc.id), [name]);
          counts.native++;
          continue;
        }
      }
    }
    // JIT code lies outside every file: no mapping (ours), or an anonymous one (heap_v2 text
    // carries all of /proc/self/maps)
    const anonymous = !mapping || str(mapping.filename) === '' || str(mapping.filename).startsWith('[');
    // or a file's mapping the file has no name for: from Node 22 on V8 maps its copy of the
    // builtins into its code range, beside the JIT code, and a dump's record of the copy (the
    // whole file at the copy's load bias) can take in JIT code below it
    const unnamedInFile = !anonymous && perfMap !== undefined;
    // V8's copy of its builtins (or other code outside the recorded mappings): the file's code
    const copy = anonymous ? copies.lookup(address) : undefined;
    if (copy) {
      const elf = elfOf(copy.file);
      const vaddr = elf?.elf.runtimeToVaddr(address, copy.start, copy.fileOffset);
      const sym = elf && vaddr !== undefined ? elf.symbols.lookup(vaddr) : undefined;
      if (elf && sym) {
        let m = copyMappings.get(copy);
        if (!m) {
          m = new Mapping({
            id: nextMappingId++,
            memoryStart: copy.start,
            memoryLimit: copy.limit,
            fileOffset: copy.fileOffset,
            filename: strings.dedup(copy.file),
            buildId: strings.dedup(elf.elf.buildId),
            hasFunctions: true,
          });
          copyMappings.set(copy, m);
          profile.mapping.push(m);
        }
        const name = demangle(sym.name);
        loc.mappingId = m.id;
        loc.line = [new Line({ functionId: functionFor(name, sym.name, copy.file).id, line: 0 })];
        nameOfLocation.set(num(loc.id), [name]);
        counts.native++;
        continue;
      }
    }
    // from Node 22 on, V8's perf map lists its builtins at the addresses of the copy
    const found = anonymous || unnamedInFile ? perfMap?.lookup(address) : undefined;
    const js = found && !(noCopies && found.kind === 'builtin') ? found : undefined;
    if (js) {
      loc.line = jsLine(js, address);
      jitLocations.push(loc);
      jitLo = Math.min(jitLo, address);
      jitHi = Math.max(jitHi, address + 1);
      nameOfLocation.set(num(loc.id), loc.line.length > 1 ? jsNames(loc.line) : [js.name]);
      counts.javascript++;
      continue;
    }
    // Code of the object's file (read, the one the process mapped, the address in one of its
    // executable segments) that has no symbol, nor a debug file (sharp's addon and libvips ship
    // stripped): named by its file, `[libvips-cpp.so.8.18.7]`, as `top` and `growth` show it,
    // so that pprof gets a name and not a bare address. Anything else (a file that could not be
    // read, an address outside its code: JIT code inside a record of V8's builtins copy) keeps
    // the location without a line, for `symbolize` where the file or the perf map is.
    if (mapping && inFileCode && !anonymous) {
      const file = str(mapping.filename);
      const name = `[${basename(file)}]`;
      loc.line = [new Line({ functionId: functionFor(name, name, file).id, line: 0 })];
      nameOfLocation.set(num(loc.id), [name]);
      counts.byFile++;
    } else {
      counts.unnamed++;
    }
  }

  for (const m of profile.mapping) {
    if ((namedInMapping.get(num(m.id)) ?? 0) > 0) {
      m.hasFunctions = true;
    }
  }
  if (jitLocations.length > 0) {
    // JIT code belongs to no file; one synthetic mapping keeps pprof from trying to
    // symbolise it again.
    const id = nextMappingId++;
    profile.mapping.push(
      new Mapping({
        id,
        memoryStart: jitLo,
        memoryLimit: jitHi,
        filename: strings.dedup('[jit]'),
        hasFunctions: true,
        hasFilenames: true,
        hasLineNumbers: true,
      }),
    );
    for (const loc of jitLocations) loc.mappingId = id;
    if (perfMap && jitKey >= 0) jitFramesAsTaken(profile, perfMap, jitKey, jitLocations, jsLine, nameOfLocation, jsNames);
  }

  if (trimmed.size > 0) {
    for (const s of profile.sample) s.locationId = s.locationId.filter((id) => !trimmed.has(num(id)));
    profile.location = profile.location.filter((l) => !trimmed.has(num(l.id)));
  }

  // jit_map_bytes served jitFramesAsTaken only: readers need not see it
  if (jitKey >= 0) for (const s of profile.sample) s.label = s.label.filter((l) => num(l.key) !== jitKey);
  cutMicrotaskOrigins(profile, nameOfLocation);
  labelThreads(profile, nameOfLocation, options.pid);
  return { profile, counts };
}

/**
 * Names each sample's JavaScript frames by the perf map as it stood when the sample's stack
 * was taken (its `jit_map_bytes` label, from the preload library: native/src/jitmap.c): V8
 * reuses the addresses of freed code, so the newest entry at an address may name code made
 * after the sample (an interpreter trampoline of a function that tiered up, given to a console
 * getter later). A location whose address read otherwise then gets a copy for those samples.
 */
function jitFramesAsTaken(
  profile: Profile,
  perfMap: PerfMap,
  key: number,
  jitLocations: Location[],
  jsLine: (js: PerfSymbol, address: number) => Line[],
  nameOfLocation: Map<number, string[]>,
  jsNames: (lines: Line[]) => string[],
): void {
  // per location, the entry that holds its address last: a sample taken once the map held it
  // sees that one (most samples), the rest look back (lookupAt)
  const jit = new Map(jitLocations.map((l) => [num(l.id), { loc: l, now: perfMap.lookup(l.address) }]));
  const copies = new Map<string, Location>();
  let nextId = profile.location.reduce((a, l) => Math.max(a, num(l.id)), 0) + 1;
  for (const s of profile.sample) {
    const label = s.label.find((l) => num(l.key) === key);
    if (!label) continue;
    const bytes = num(label.num);
    s.locationId = s.locationId.map((id) => {
      const at = jit.get(num(id));
      if (!at?.now || (at.now.written ?? Infinity) <= bytes) return id;
      const { loc, now } = at;
      const then = perfMap.lookupAt(loc.address, bytes);
      if (then === now || then === undefined) return id; // no entry then: the newest, as before
      const k = `${num(id)}\0${then.start}\0${then.raw}`;
      let copy = copies.get(k);
      if (!copy) {
        copy = new Location({ id: nextId++, mappingId: loc.mappingId, address: loc.address, line: jsLine(then, num(loc.address)) });
        copies.set(k, copy);
        profile.location.push(copy);
        nameOfLocation.set(num(copy.id), copy.line.length > 1 ? jsNames(copy.line) : [then.name]);
      }
      return copy.id;
    });
  }
}

/** V8 running promise reactions (microtasks): see cutMicrotaskOrigins. */
const MICROTASKS = /^(Builtins_RunMicrotasks|Builtins_JSRunMicrotasksEntry|v8::internal::MicrotaskQueue::(RunMicrotasks|PerformCheckpoint))\b/;

/**
 * The completion of pool work runs its callback and then the microtask checkpoint, both
 * inside the completion's trampoline (native/src/pool.c), so a promise continuation that
 * merely resumed there (an `await` that the completion settled) would be charged to the code
 * that queued the work. Its async context is its own function's, not the completion's: where
 * a part of a stack between two "[queued by]" frames ran promise reactions, the queuing stack
 * after it is not its cause, and the stack ends there.
 */
function cutMicrotaskOrigins(profile: Profile, nameOfLocation: Map<number, string[]>): void {
  for (const s of profile.sample) {
    let ranMicrotasks = false;
    for (let i = 0; i < s.locationId.length; i++) {
      const names = nameOfLocation.get(num(s.locationId[i]!)) ?? [];
      if (names.includes(QUEUED_BY)) {
        if (ranMicrotasks) {
          s.locationId = s.locationId.slice(0, i);
          break;
        }
      } else if (names.some((n) => MICROTASKS.test(n))) ranMicrotasks = true;
    }
  }
}

/** Replaces each sample's `thread` label by the kind of thread its tid is (see threads.ts). */
function labelThreads(profile: Profile, nameOfLocation: Map<number, string[]>, pid: number | undefined): void {
  const strings = profile.stringTable;
  const threadKey = strings.dedup('thread');
  const tidKey = strings.dedup('tid');
  const kinds = new Map<number, string>();
  const tidOf = (labels: Label[]) => num(labels.find((l) => num(l.key) === tidKey)?.num);
  for (const s of profile.sample) {
    const tid = tidOf(s.label);
    if (kinds.has(tid)) continue;
    const names = s.locationId.flatMap((id) => nameOfLocation.get(num(id)) ?? []);
    const kind = classifyThread(names, tid, pid);
    if (kind !== undefined) kinds.set(tid, kind);
  }
  for (const s of profile.sample) {
    const tid = tidOf(s.label);
    const own = strings.strings[num(s.label.find((l) => num(l.key) === threadKey)?.str)] ?? '';
    const kind = kinds.get(tid) ?? (own ? `${own} (tid ${tid})` : `tid ${tid}`);
    s.label = s.label.filter((l) => num(l.key) !== threadKey);
    s.label.push(new Label({ key: threadKey, str: strings.dedup(kind) }));
  }
}

/**
 * The preload library's marker frame between a sample's own frames and the stack that queued
 * the work it ran in (libuv's thread pool, native/src/pool.c), and the name it is shown by.
 */
const QUEUED_BY_SYMBOL = 'mimalloc_pprof_queued_by';
export const QUEUED_BY = '[queued by]';

export const isPreloadLibrary = (filename: string): boolean => basename(filename) === 'libmimalloc-pprof.so';
