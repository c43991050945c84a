/**
 * The JavaScript heap beside the native heap in one profile: V8's sampling heap profile
 * (`HeapProfiler.getSamplingProfile`, a call tree of live sampled objects) merged into a
 * native heap profile as samples labelled `heap=js`, the native ones labelled `heap=native`.
 *
 * V8 samples JavaScript allocations as the preload library samples native ones: a Poisson
 * process over bytes with the same mean interval, each sampled object standing for
 * 1 / (1 − e^(−size/interval)) objects of its size. A node's `selfSize` is already that
 * estimate (in bytes), so the merged values are in the same unsampled units as the native
 * estimates and pprof's default view sums both. Objects are estimated from the individual
 * samples the same way. V8 keeps only the samples of objects still alive: the JavaScript
 * samples carry in-use values, and allocated values of 0.
 *
 * JavaScript functions are the same functions as the native stacks' JavaScript frames (named
 * from V8's perf map): a frame whose name, file and first line match one of them uses it, so
 * `-focus`, `top` and the report see one function, whichever heap its memory is in.
 */
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

/** Horvitz–Thompson weight of one sampled object of `size` bytes at mean interval R. */
function weight(size: number, interval: number): number {
  return size <= 0 ? 1 : 1 / -Math.expm1(-size / interval);
}

/**
 * Adds the JavaScript heap's samples to `profile` (in place) and labels every sample by its
 * heap. `interval` is the mean sampling interval V8 used.
 */
export function mergeJsHeap(profile: Profile, js: V8SamplingHeapProfile, interval: number): JsHeapSummary {
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
  let nextFunction = profile.function.reduce((a, f) => Math.max(a, Number(f.id)), 0) + 1;
  let nextLocation = profile.location.reduce((a, l) => Math.max(a, Number(l.id)), 0) + 1;
  const locations = new Map<ProfileFunction, Location>();
  const locationOf = (cf: V8SamplingHeapNode['callFrame']): Location => {
    const { name, file, line, column } = frameName(cf);
    const k = key(name, file, line);
    let f = functions.get(k);
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
    }
    return loc;
  };

  const objectsOf = new Map<number, number>();
  for (const s of js.samples ?? []) objectsOf.set(s.nodeId, (objectsOf.get(s.nodeId) ?? 0) + weight(s.size, interval));

  const summary: JsHeapSummary = { bytes: 0, objects: 0, samples: js.samples?.length ?? 0 };
  const jsLabel = () => [new Label({ key: heapKey, str: strings.dedup('js') }), new Label({ key: threadKey, str: strings.dedup('main') })];
  // depth first, the path from the root's child down (the root is V8's "(root)")
  const walk = (node: V8SamplingHeapNode, path: Location[]) => {
    if (node.selfSize > 0 && path.length > 0) {
      const value = profile.sampleType.map(() => 0);
      const objects = objectsOf.get(node.id) ?? 0;
      value[at.inuseSpace] = Math.round(node.selfSize);
      if (at.inuseObjects >= 0) value[at.inuseObjects] = Math.round(objects);
      profile.sample.push(new Sample({ locationId: [...path].reverse().map((l) => l.id), value, label: jsLabel() }));
      summary.bytes += node.selfSize;
      summary.objects += objects;
    }
    for (const child of node.children) walk(child, [...path, locationOf(child.callFrame)]);
  };
  walk(js.head, []);
  return summary;
}
