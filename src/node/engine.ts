/**
 * What the profiling worker does with the preload library's raw profiles: take one (the
 * addon's atomic dump, read back and named: ELF + V8 perf map), and render snapshots as
 * gzipped profile.proto, as annotated heap_v2 text, as a delta of two snapshots, or as the
 * window profile a continuous profiler wants. Synchronous by design: it runs in the worker
 * thread (worker.ts), never on the application's event loop.
 */
import { existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

import { Function as PFunction, Line, type Location, type Mapping, type Profile } from '../profile/pprof.js';

import { packageRoot } from '../preload/library.js';
import { diff, encodeHeapText, indexProfile, merge, parseProfile, scale, str, validateProfile } from '../profile/index.js';
import { canonical, frameNames } from '../profile/model.js';
import { isPreloadLibrary, symbolize } from '../symbolize/index.js';
import { V8LogFollower, type V8CodeLog } from '../symbolize/v8-log.js';
import type { NativeAddon } from './addon.js';
import type { CodeLogStart } from './code-log.js';

/** Largest raw profile read back (a profile of millions of stacks is a bug elsewhere). */
const MAX_RAW_BYTES = 512 << 20;

let version: string | undefined;
function packageVersion(): string {
  if (version === undefined) {
    try {
      version = (JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string }).version;
    } catch {
      version = 'unknown';
    }
  }
  return version;
}

/** The perf map V8 writes with --perf-basic-prof, when this process has one. */
export function perfMapOfThisProcess(): string | undefined {
  const path = `/tmp/perf-${process.pid}.map`;
  return existsSync(path) ? path : undefined;
}

/**
 * Names of native frames from earlier snapshots, by (file, build id, file offset): a process
 * allocates from the same few thousand call sites over and over, and naming them from ELF
 * symbol tables and demangling is most of a snapshot's cost. JavaScript frames are named
 * from the perf map every time (V8 reuses code space). Bounded; cleared when full.
 */
const nativeNames = new Map<string, { name: string; systemName: string; filename: string }>();
const NATIVE_NAMES_MAX = 200_000;

function nativeKey(p: Profile, loc: Location, m: Mapping): string | undefined {
  const file = str(p, m.filename);
  if (file === '' || file.startsWith('[') || isPreloadLibrary(file)) return undefined;
  const offset = BigInt(loc.address) - BigInt(m.memoryStart) + BigInt(m.fileOffset);
  return `${file}\0${str(p, m.buildId)}\0${offset.toString(16)}`;
}

/** Names the locations seen before (so symbolize() skips them); returns their mappings. */
function nameKnownFrames(p: Profile): Set<Mapping> {
  const mappings = new Map(p.mapping.map((m) => [Number(m.id), m]));
  const functions = new Map<string, PFunction>();
  let nextId = p.function.reduce((a, f) => Math.max(a, Number(f.id)), 0) + 1;
  const named = new Set<Mapping>();
  for (const loc of p.location) {
    if (loc.line.length > 0) continue;
    const m = mappings.get(Number(loc.mappingId));
    const key = m && nativeKey(p, loc, m);
    const known = key === undefined ? undefined : nativeNames.get(key);
    if (!known || !m) continue;
    const fkey = `${known.name}\0${known.systemName}\0${known.filename}`;
    let f = functions.get(fkey);
    if (!f) {
      f = new PFunction({
        id: nextId++,
        name: p.stringTable.dedup(known.name),
        systemName: p.stringTable.dedup(known.systemName),
        filename: p.stringTable.dedup(known.filename),
      });
      functions.set(fkey, f);
      p.function.push(f);
    }
    loc.line = [new Line({ functionId: f.id, line: 0 })];
    named.add(m);
  }
  return named;
}

/** Remembers the native names symbolize() found. */
function rememberNativeNames(p: Profile): void {
  if (nativeNames.size > NATIVE_NAMES_MAX) nativeNames.clear();
  const mappings = new Map(p.mapping.map((m) => [Number(m.id), m]));
  const functions = new Map(p.function.map((f) => [Number(f.id), f]));
  for (const loc of p.location) {
    if (loc.line.length !== 1) continue;
    const m = mappings.get(Number(loc.mappingId));
    const key = m && nativeKey(p, loc, m);
    const f = functions.get(Number(loc.line[0]!.functionId));
    // a stripped object's `[file]` is not kept: a later snapshot may find better (a debug file)
    if (key === undefined || !f || nativeNames.has(key) || str(p, f.name).startsWith('[')) continue;
    nativeNames.set(key, { name: str(p, f.name), systemName: str(p, f.systemName), filename: str(p, f.filename) });
  }
}

/** This process's code logs, read as they grow (one follower for the process's life). */
let follower: V8LogFollower | undefined;
function followerOf(start: CodeLogStart): V8LogFollower {
  follower ??= new V8LogFollower(start.starts);
  return follower;
}

/**
 * Dumps, reads back and symbolises the profile of this process (`peak`: as it stood at the
 * high-water mark of its estimated in-use bytes); `path` is removed once read.
 */
export function takeSnapshot(addon: NativeAddon, path: string, peak = false, codeLog?: CodeLogStart): Profile {
  try {
    // the perf map as the dump sees it: code made afterwards may reuse a sampled frame's address
    const perfMap = perfMapOfThisProcess();
    let perfMapBytes: number | undefined;
    try {
      perfMapBytes = perfMap ? statSync(perfMap).size : undefined;
    } catch {
      perfMapBytes = undefined;
    }
    addon.dump(path, 'proto', peak);
    const data = readFileSync(path);
    rmSync(path, { force: true });
    const profile = parseProfile(data, 'in-process profile', { maxBytes: MAX_RAW_BYTES });
    const known = nameKnownFrames(profile);
    let v8Log: V8CodeLog | undefined;
    try {
      v8Log = codeLog && perfMap ? followerOf(codeLog).update() : undefined;
    } catch {
      v8Log = undefined; // inlined functions then show as their caller
    }
    symbolize(profile, {
      pid: process.pid,
      perfMapPath: perfMap,
      ...(perfMapBytes !== undefined ? { perfMapBytes } : {}),
      ...(v8Log && codeLog ? { v8Log, v8LogFrom: codeLog.perfMapBytes } : {}),
      trimFile: isPreloadLibrary,
    });
    for (const m of known) m.hasFunctions = true;
    rememberNativeNames(profile);
    profile.comment.push(profile.stringTable.dedup(`mimalloc-pprof ${packageVersion()} in-process pid=${process.pid}`));
    return profile;
  } catch (e) {
    rmSync(path, { force: true });
    throw e;
  }
}

export interface RenderSpec {
  format: 'proto' | 'text';
  /** proto only; default true. */
  gzip?: boolean;
  /** The sample type pprof shows first (`alloc_space` for /allocs); kept when absent. */
  defaultSampleType?: string;
  /** false: leave out the JavaScript heap's samples (heap=js) when the snapshot has them. */
  jsHeap?: boolean;
}

/** The profile without its JavaScript heap's samples (heap=js). */
function withoutJsHeap(p: Profile): Profile {
  const heap = p.stringTable.strings.indexOf('heap');
  const js = p.stringTable.strings.indexOf('js');
  if (heap < 0 || js < 0) return p;
  const copy = Object.assign(Object.create(Object.getPrototypeOf(p) as object) as Profile, p);
  copy.sample = p.sample.filter((s) => !s.label.some((l) => Number(l.key) === heap && Number(l.str) === js));
  return copy;
}

function varint(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

/** profile.proto bytes, validated, gzipped at Go's runtime level (BestSpeed) unless `gzip` is false. */
export function encode(p: Profile, gzip = true): Uint8Array {
  validateProfile(p);
  const raw = p.encode();
  return gzip ? new Uint8Array(gzipSync(raw, { level: 1 })) : raw;
}

/**
 * heap_v2 text as Go's `?debug=1` writes it: each row followed by one comment line per frame
 * (`#\t0x<address>\t<function>\t<file>:<line>`), which pprof's parser skips and people read.
 */
export function annotatedHeapText(p: Profile): string {
  const text = encodeHeapText(p, 'in-process profile');
  const lines = text.split('\n');
  const ix = indexProfile(p);
  const fnOf = new Map(p.function.map((f) => [Number(f.id), f]));
  const out: string[] = [lines[0]!];
  for (let i = 0; i < p.sample.length; i++) {
    out.push(lines[i + 1]!);
    for (const id of p.sample[i]!.locationId) {
      const loc = ix.locations.get(Number(id));
      if (!loc) continue;
      const names = frameNames(ix, loc);
      const line = loc.line[0];
      const f = line ? fnOf.get(Number(line.functionId)) : undefined;
      const file = f ? str(p, f.filename) : '';
      const where = file !== '' ? `\t${file}${line && Number(line.line) > 0 ? `:${Number(line.line)}` : ''}` : '';
      out.push(`#\t0x${loc.address.toString(16)}\t${names.join(' ')}${where}`);
    }
  }
  out.push(...lines.slice(p.sample.length + 1));
  return out.join('\n');
}

/**
 * A snapshot as bytes. `cache` (one per snapshot) keeps the encoded message, so variants that
 * differ only in their default sample type cost one gzip each: protobuf readers keep the last
 * value of a scalar field, so the variant is the message with field 14 appended.
 */
export function render(p0: Profile, spec: RenderSpec, cache: Map<string, Uint8Array> = new Map()): Uint8Array {
  const p = spec.jsHeap === false ? withoutJsHeap(p0) : p0;
  const variant = spec.jsHeap === false ? '-nojs' : '';
  if (spec.format === 'text') {
    let t = cache.get(`text${variant}`);
    if (!t) cache.set(`text${variant}`, (t = new TextEncoder().encode(annotatedHeapText(p))));
    return t;
  }
  let raw = cache.get(`raw${variant}`);
  if (!raw) cache.set(`raw${variant}`, (raw = encode(p, false)));
  const type = spec.defaultSampleType === undefined ? undefined : p.sampleType.find((t) => str(p, t.type) === spec.defaultSampleType);
  if (type) {
    const tail = [0x70, ...varint(Number(type.type))]; // field 14 (default_sample_type), varint
    const out = new Uint8Array(raw.length + tail.length);
    out.set(raw);
    out.set(tail, raw.length);
    raw = out;
  }
  return spec.gzip === false ? raw : new Uint8Array(gzipSync(raw, { level: 1 }));
}

/**
 * NEXT − BASE as Go's `?seconds=N` delta: every sample type is the change over the window
 * (alloc_*: what was allocated in it; inuse_*: what the in-use memory grew or shrank by).
 */
export function renderDelta(base: Profile, baseTimeNs: bigint, next: Profile, nextTimeNs: bigint, spec: RenderSpec): Uint8Array {
  const d = diff(base, next, { keepLabels: true }); // thread and heap labels, as the snapshots have them
  d.timeNanos = canonical(baseTimeNs);
  d.durationNanos = canonical(nextTimeNs - baseTimeNs);
  d.comment.push(d.stringTable.dedup(`mimalloc-pprof delta over ${Number(nextTimeNs - baseTimeNs) / 1e9} s`));
  return render(d, spec);
}

const isAlloc = (p: Profile, i: number) => str(p, p.sampleType[i]!.type).startsWith('alloc_');

/**
 * The profile of one push window for a continuous profiler: in-use figures as they are at
 * the end of the window, allocated figures of the window only (NEXT − BASE, clamped at 0
 * when the profiler was restarted or reset in between), sample labels dropped (the thread
 * label would split series), gzipped.
 */
export function renderWindow(base: Profile | undefined, next: Profile, fromNs: bigint, untilNs: bigint): Uint8Array {
  const alloc = next.sampleType.map((_, i) => isAlloc(next, i));
  /** Keeps the values where `keepType` says so (negatives clamped to 0), drops all-zero samples. */
  const only = (p: Profile, keepType: (i: number) => boolean): Profile => {
    for (const s of p.sample) s.value = s.value.map((v, i) => (!keepType(i) || v < 0 ? 0 : v));
    p.sample = p.sample.filter((s) => s.value.some((v) => v !== 0 && v !== 0n));
    return p;
  };
  // diff against an empty profile of the same types: the same stacks, without labels
  const parts = [only(diff(scale(next, 0), next), (i) => !alloc[i])];
  if (base && alloc.some(Boolean)) {
    try {
      const d = diff(base, next);
      if (d.sampleType.length === next.sampleType.length) parts.push(only(d, (i) => alloc[i] === true));
    } catch {
      // the profiler was restarted with other sample types: in-use figures only
    }
  }
  let out: Profile;
  try {
    out = parts.length > 1 ? merge(parts) : parts[0]!;
  } catch {
    out = parts[0]!;
  }
  out.timeNanos = canonical(fromNs);
  out.durationNanos = canonical(untilNs - fromNs);
  out.defaultSampleType = out.stringTable.dedup('inuse_space');
  return encode(out);
}
