/**
 * The JavaScript heap beside the native heap in one profile: V8's sampling heap profile
 * (`HeapProfiler.getSamplingProfile`, a call tree of live sampled objects) merged into a
 * native heap profile as samples labelled `heap=js`, the native ones labelled `heap=native`.
 *
 * V8 samples JavaScript allocations as the preload library samples native ones: a Poisson
 * process over bytes with the same mean interval, each sampled object standing for
 * 1 / (1 − e^(−size/interval)) objects of its size. A node's `selfSize`, and each sample's
 * `size` in the protocol, are already that estimate (in bytes), so the merged values are in
 * the same unsampled units as the native estimates and pprof's default view sums both.
 * Objects are solved from each sample's estimate (jsSampleObjects). V8 keeps only the samples of objects still alive: the JavaScript
 * samples carry in-use values, and allocated values of 0.
 *
 * JavaScript functions are the same functions as the native stacks' JavaScript frames (named
 * from V8's perf map): a frame whose name, file and first line match one of them uses it, so
 * `-focus`, `top` and the report see one function, whichever heap its memory is in.
 */
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import { isJavaScriptName } from '../symbolize/perfmap.js';
import { Function as ProfileFunction, Label, Line, Location, type Profile, Sample } from './model.js';

/** The parts of V8's SamplingHeapProfile (Chrome DevTools protocol) that are used. */
export interface V8SamplingHeapProfile {
  head: V8SamplingHeapNode;
  samples?: { size: number; nodeId: number; ordinal?: number }[];
}

export interface V8SamplingHeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number; scriptId?: string };
  selfSize: number;
  id: number;
  children: V8SamplingHeapNode[];
}

export interface JsHeapSummary {
  /** Estimated bytes and objects in use on the JavaScript heap, as merged. */
  bytes: number;
  objects: number;
  samples: number;
}

/** A V8 call frame as the perf map names the same function (perfmap.ts: 1-based, paths). */
function frameName(cf: V8SamplingHeapNode['callFrame']): { name: string; file: string; line: number; column: number } {
  const line = cf.lineNumber + 1;
  const column = cf.columnNumber + 1;
  let file = cf.url;
  if (file.startsWith('file://')) {
    try {
      file = fileURLToPath(file);
    } catch {
      // left as it is
    }
  }
  const name = cf.functionName || (line === 1 && column === 1 ? '(top level)' : '(anonymous)');
  return { name, file, line, column };
}

/** This package's own scripts (dist/src/…: the exit hook, the API's snapshot path): the
 * profiler's work, which is never the program's (their subtrees are left out). */
const OWN_SCRIPTS = `${dirname(dirname(fileURLToPath(import.meta.url)))}/`;

/** Whether a script path is one of this package's own. */
export function isOwnScript(file: string): boolean {
  return file.startsWith(OWN_SCRIPTS);
}

/**
 * The objects one of V8's samples stands for. The protocol's sample `size` is already V8's
 * estimate: the object's size x times its scaled count, floor(1 / (1 − e^(−x/R)))
 * (sampling-heap-profiler.cc, ScaleSample), so S = x · w(x) up to the floor, which increases
 * with x from R on. x is solved from S (bisection) and the count is S / x. For S at or below R
 * (the floor took a small object's last part) x is small: 16 bytes is taken.
 */
export function jsSampleObjects(scaledSize: number, interval: number): number {
  if (scaledSize <= 0) return 0;
  if (scaledSize <= interval) return scaledSize / 16;
  const f = (x: number) => x / -Math.expm1(-x / interval);
  let lo = 0;
  let hi = scaledSize;
  for (let i = 0; i < 60; i++) {
    const mid = (lo + hi) / 2;
    if (f(mid) < scaledSize) lo = mid;
    else hi = mid;
  }
  return scaledSize / Math.max(hi, 1);
}

/**
 * Adds the JavaScript heap's samples to `profile` (in place) and labels every sample by its
 * heap. `interval` is the mean sampling interval V8 used.
 */
export function mergeJsHeap(profile: Profile, js: V8SamplingHeapProfile, interval: number, anchored: ReadonlySet<number> = new Set()): JsHeapSummary {
  const strings = profile.stringTable;
  const str = (i: number | bigint) => strings.strings[Number(i)] ?? '';
  const heapKey = strings.dedup('heap');
  const threadKey = strings.dedup('thread');
  const labelled = (s: Sample) => s.label.some((l) => Number(l.key) === heapKey);
  for (const s of profile.sample) if (!labelled(s)) s.label.push(new Label({ key: heapKey, str: strings.dedup('native') }));

  const types = profile.sampleType.map((t) => str(t.type));
  const at = { inuseSpace: types.indexOf('inuse_space'), inuseObjects: types.indexOf('inuse_objects') };
  if (at.inuseSpace < 0) throw new Error('the profile has no inuse_space sample type');

  const key = (name: string, file: string, line: number) => `${name}\0${file}\0${line}`;
  const functions = new Map<string, ProfileFunction>();
  for (const f of profile.function) {
    if (isJavaScriptName(str(f.systemName))) {
      const k = key(str(f.name), str(f.filename), Number(f.startLine));
      if (!functions.has(k)) functions.set(k, f);
    }
  }
  // V8 names a frame only while its script is alive: at exit, after the collection, the
  // scripts of modules whose functions are all gone (a CommonJS module's top level, Node's
  // run_main_module) have no url and no line in the sampling profile. Such a frame is named as
  // the native stacks name the same function (from V8's perf map): by its name, its script (the
  // file other frames of the same scriptId have), and where that leaves several, by the native
  // stacks' JavaScript caller and callee edges next to it.
  // MIMALLOC_PPROF_TEST_JS_HEAP_RAW=1: the tests' control (test/run/js-heap-names.test.ts)
  const raw = process.env.MIMALLOC_PPROF_TEST_JS_HEAP_RAW === '1';
  const byId = new Map(profile.function.map((f) => [Number(f.id), f]));
  const locById = new Map(profile.location.map((l) => [Number(l.id), l]));
  // by name: a frame to resolve looks among its namesakes only (tsc: thousands of each)
  const jsByName = new Map<string, ProfileFunction[]>();
  for (const f of functions.values()) {
    const name = str(f.name);
    (jsByName.get(name) ?? jsByName.set(name, []).get(name)!).push(f);
  }
  // each function id's JavaScript function, one per name, file and line (the native side has
  // one per tier of code), or null: worked out once per function, not once per frame
  const canonical = new Map<number, ProfileFunction | null>();
  for (const [id, any] of byId) {
    canonical.set(id, isJavaScriptName(str(any.systemName)) ? (functions.get(key(str(any.name), str(any.filename), Number(any.startLine))) ?? any) : null);
  }
  // the JavaScript functions of each location, outermost first
  const jsOfLocation = new Map<number, ProfileFunction[]>();
  for (const [id, loc] of locById) {
    const fs: ProfileFunction[] = [];
    for (let j = loc.line.length - 1; j >= 0; j--) {
      const f = canonical.get(Number(loc.line[j]!.functionId));
      if (f) fs.push(f);
    }
    jsOfLocation.set(id, fs);
  }
  const callees = new Map<ProfileFunction, Set<ProfileFunction>>();
  for (const smp of profile.sample) {
    let caller: ProfileFunction | undefined;
    for (let i = smp.locationId.length - 1; i >= 0; i--) {
      for (const f of jsOfLocation.get(Number(smp.locationId[i])) ?? []) {
        if (caller && caller !== f) (callees.get(caller) ?? callees.set(caller, new Set()).get(caller)!).add(f);
        caller = f;
      }
    }
  }
  const fileOfScript = new Map<string, string>();
  const collectFiles = (node: V8SamplingHeapNode) => {
    const id = node.callFrame.scriptId;
    if (id && node.callFrame.url && !fileOfScript.has(id)) fileOfScript.set(id, frameName(node.callFrame).file);
    for (const c of node.children) collectFiles(c);
  };
  collectFiles(js.head);
  const unresolved = (cf: V8SamplingHeapNode['callFrame']) => !raw && cf.url === '' && cf.lineNumber < 0 && cf.functionName !== '(root)';
  /** The native side's function for a frame V8 could no longer name, or undefined. */
  const resolve = (node: V8SamplingHeapNode, parent: ProfileFunction | undefined): ProfileFunction | undefined => {
    const cf = node.callFrame;
    const file = cf.scriptId ? fileOfScript.get(cf.scriptId) : undefined;
    const named = cf.functionName ? (jsByName.get(cf.functionName) ?? []) : [...(jsByName.get('(top level)') ?? []), ...(jsByName.get('(anonymous)') ?? [])];
    let c = named.filter((f) => (file === undefined || str(f.filename) === file) && !isOwnScript(str(f.filename)));
    if (c.length > 1 && parent) {
      const next = c.filter((f) => callees.get(parent)?.has(f));
      if (next.length > 0) c = next;
    }
    if (c.length > 1) {
      // by the callees: the children V8 still names
      const isKid = (g: ProfileFunction) =>
        node.children.some((k) =>
          k.callFrame.url !== ''
            ? g === functions.get(key(frameName(k.callFrame).name, frameName(k.callFrame).file, frameName(k.callFrame).line))
            : k.callFrame.functionName !== '' && str(g.name) === k.callFrame.functionName,
        );
      const next = c.filter((f) => [...(callees.get(f) ?? [])].some(isKid));
      if (next.length > 0) c = next;
    }
    if (c.length > 1 && !cf.functionName) {
      const top = c.filter((f) => str(f.name) === '(top level)');
      if (top.length === 1) c = top;
    }
    return c.length === 1 ? c[0] : undefined;
  };
  let nextFunction = profile.function.reduce((a, f) => Math.max(a, Number(f.id)), 0) + 1;
  let nextLocation = profile.location.reduce((a, l) => Math.max(a, Number(l.id)), 0) + 1;
  const locations = new Map<ProfileFunction, Location>();
  const locationOf = (cf: V8SamplingHeapNode['callFrame'], known?: ProfileFunction): Location => {
    const { name, file, line, column } = frameName(cf);
    const k = key(name, file, line);
    let f = known ?? functions.get(k);
    if (!f) {
      f = new ProfileFunction({
        id: nextFunction++,
        name: strings.dedup(name),
        systemName: strings.dedup(`JS:${name} ${file}:${line}:${column}`),
        filename: strings.dedup(file),
        startLine: line,
      });
      profile.function.push(f);
      functions.set(k, f);
    }
    let loc = locations.get(f);
    if (!loc) {
      loc = new Location({ id: nextLocation++, line: [new Line({ functionId: f.id, line: Number(f.startLine) })] });
      profile.location.push(loc);
      locations.set(f, loc);
      fnOf.set(loc, f);
    }
    return loc;
  };

  // the samples already in the profile with their native stacks (src/profile/js-anchors.ts)
  // leave their node: what stays is V8's estimate of the others
  // (a node's bytes are the sum of its samples' estimates when the profile lists its samples:
  // V8 rounds a node's selfSize per object size and each sample by itself, so selfSize less the
  // anchored samples would leave a remainder of rounding, or go below 0)
  const objectsOf = new Map<number, number>();
  const bytesOf = new Map<number, number>();
  const summary: JsHeapSummary = { bytes: 0, objects: 0, samples: js.samples?.length ?? 0 };
  for (const s of js.samples ?? []) {
    const objects = jsSampleObjects(s.size, interval);
    if (s.ordinal !== undefined && anchored.has(s.ordinal)) {
      summary.bytes += s.size;
      summary.objects += objects;
    } else {
      objectsOf.set(s.nodeId, (objectsOf.get(s.nodeId) ?? 0) + objects);
      bytesOf.set(s.nodeId, (bytesOf.get(s.nodeId) ?? 0) + s.size);
    }
  }
  const listed = (js.samples?.length ?? 0) > 0;
  const jsLabel = () => [new Label({ key: heapKey, str: strings.dedup('js') }), new Label({ key: threadKey, str: strings.dedup('main') })];
  // depth first, the path from the root's child down (the root is V8's "(root)")
  const fnOf = new Map<Location, ProfileFunction>();
  const walk = (node: V8SamplingHeapNode, path: Location[]) => {
    const selfSize = listed ? (bytesOf.get(node.id) ?? 0) : node.selfSize;
    if (selfSize >= 0.5 && path.length > 0) {
      const value = profile.sampleType.map(() => 0);
      const objects = objectsOf.get(node.id) ?? 0;
      value[at.inuseSpace] = Math.round(selfSize);
      if (at.inuseObjects >= 0) value[at.inuseObjects] = Math.round(objects);
      profile.sample.push(new Sample({ locationId: [...path].reverse().map((l) => l.id), value, label: jsLabel() }));
      summary.bytes += selfSize;
      summary.objects += objects;
    }
    for (const child of node.children) {
      // the profiler's own work (the exit hook's collection, the API's snapshot) is not the program's
      if (!raw && isOwnScript(frameName(child.callFrame).file)) continue;
      const parent = path.length > 0 ? fnOf.get(path[path.length - 1]!) : undefined;
      const known = unresolved(child.callFrame) ? resolve(child, parent) : undefined;
      // a nameless frame V8 can no longer place, at the root and holding nothing itself, that no
      // native stack has (an ES module's evaluation, above its `(top level)`): its children
      // start where the native stacks start
      const own = listed ? (bytesOf.get(child.id) ?? 0) : child.selfSize;
      if (!known && path.length === 0 && child.callFrame.functionName === '' && unresolved(child.callFrame) && own < 0.5) {
        walk(child, path);
        continue;
      }
      const loc = locationOf(child.callFrame, known);
      walk(child, [...path, loc]);
    }
  };
  walk(js.head, []);
  return summary;
}
