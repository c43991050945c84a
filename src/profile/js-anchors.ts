/**
 * The JavaScript heap's samples with the native stacks where V8 took them.
 *
 * V8's sampling heap profiler records the functions of the physical frames: a function that
 * TurboFan or Maglev inlined into its caller is missing, and its objects are charged to the
 * caller. Under `run`, the preload library keeps the native stack of every sample V8 takes
 * (an "anchor", native/src/jsanchor.c), numbered as V8 numbers its samples (`ordinal`), and
 * the exit hook writes those of the live samples beside V8's profile. Such a sample goes into
 * the raw profile before it is named, with those return addresses: the symbolisation that
 * names the native stacks (ELF symbols, V8's perf map, the functions its code log says were
 * inlined) names it too, so one function has one name in both heaps, with the same callers
 * and roots. After naming, the frames above its first JavaScript frame (V8's allocation path,
 * its sampler's own frames) go; a sample whose stack holds no JavaScript frame, or runs this
 * package's own scripts, goes whole (V8's own stacks leave both out too). The samples V8 took
 * before the arming, or all of them when the exit hook refused the anchors, keep V8's stacks
 * (src/profile/js-heap.ts).
 */
import { isJavaScriptName } from '../symbolize/perfmap.js';
import { isOwnScript, jsSampleObjects, type V8SamplingHeapProfile } from './js-heap.js';
import { Label, Line, Location, type Profile, Sample } from './model.js';

/** What the exit hook writes of the anchors (src/node/exit-hook.cts). */
export interface JsAnchors {
  /** By V8's ordinal: the native stack, leaf first, as hex return addresses. */
  frames: Record<string, string[]>;
  /** By ordinal: the size of V8's perf map when the sample was taken (names JIT frames as then). */
  mapBytes?: Record<string, number>;
  made: number;
  live: number;
  dropped: number;
  /** Why none is used (a sample whose number and V8's sample_id disagree), when so. */
  refused?: string;
}

/** The library's deepest stack (MI_PROF_MAX_BT): an anchor that deep may have lost its roots
 * to the cut, where V8's own stack (128 JavaScript frames, no native ones) reaches further. */
const ANCHOR_MAX_DEPTH = 128;

/** The label that marks an anchored sample between injection and trimming. */
const ORDINAL_KEY = 'js_ordinal';

/**
 * Adds V8's live samples that have an anchor to the raw (unnamed) profile `raw`, as samples
 * of heap=js on the main thread, with V8's estimate (the protocol's sample size is already
 * the object's size over its probability).
 * Returns the ordinals added: those samples are no longer V8's to merge.
 */
export function injectAnchoredJsSamples(raw: Profile, js: V8SamplingHeapProfile, interval: number, anchors: JsAnchors | undefined): Set<number> {
  const added = new Set<number>();
  if (!anchors || anchors.refused !== undefined) return added;
  const strings = raw.stringTable;
  const str = (i: number | bigint) => strings.strings[Number(i)] ?? '';
  const types = raw.sampleType.map((t) => str(t.type));
  const at = { space: types.indexOf('inuse_space'), objects: types.indexOf('inuse_objects') };
  if (at.space < 0) return added;
  const mappings = raw.mapping.map((m) => ({ id: Number(m.id), lo: BigInt(m.memoryStart), hi: BigInt(m.memoryLimit) }));
  const locationAt = new Map<bigint, Location>();
  for (const l of raw.location) locationAt.set(BigInt(l.address), l);
  let nextLocation = raw.location.reduce((a, l) => Math.max(a, Number(l.id)), 0) + 1;
  const location = (ra: bigint): Location => {
    // a return address: the location points into the call, as the library writes them
    const address = ra > 0n ? ra - 1n : 0n;
    let l = locationAt.get(address);
    if (!l) {
      const m = mappings.find((x) => address >= x.lo && address < x.hi);
      l = new Location({ id: nextLocation++, address, mappingId: m?.id ?? 0 });
      raw.location.push(l);
      locationAt.set(address, l);
    }
    return l;
  };
  const keys = {
    heap: strings.dedup('heap'),
    js: strings.dedup('js'),
    thread: strings.dedup('thread'),
    main: strings.dedup('main'),
    ordinal: strings.dedup(ORDINAL_KEY),
    mapBytes: strings.dedup('jit_map_bytes'),
  };
  for (const s of js.samples ?? []) {
    const ordinal = s.ordinal;
    const frames = ordinal === undefined ? undefined : anchors.frames[String(ordinal)];
    if (ordinal === undefined || !frames || frames.length === 0 || frames.length >= ANCHOR_MAX_DEPTH) continue;
    const value = raw.sampleType.map(() => 0);
    value[at.space] = Math.round(s.size);
    if (at.objects >= 0) value[at.objects] = Math.round(jsSampleObjects(s.size, interval));
    raw.sample.push(
      new Sample({
        locationId: frames.map((h) => location(BigInt(`0x${h}`)).id),
        value,
        label: [
          new Label({ key: keys.heap, str: keys.js }),
          new Label({ key: keys.thread, str: keys.main }),
                    new Label({ key: keys.ordinal, num: ordinal }),
          ...(anchors.mapBytes?.[String(ordinal)] ? [new Label({ key: keys.mapBytes, num: anchors.mapBytes[String(ordinal)]! })] : []),
        ],
      }),
    );
    added.add(ordinal);
  }
  return added;
}

/**
 * After naming: each anchored sample loses the frames above its first JavaScript frame and
 * its marker. One under this package's own scripts goes (`own`: V8's stacks leave those out
 * too, so they go back to them, and out); one
 * whose native stack shows no JavaScript frame goes, and its ordinal is returned in `unplaced`:
 * V8's own stack for it is used instead.
 */
export function trimAnchoredJsSamples(profile: Profile): { kept: number; own: Set<number>; unplaced: Set<number> } {
  const strings = profile.stringTable;
  const str = (i: number | bigint) => strings.strings[Number(i)] ?? '';
  const ordinalKey = strings.strings.indexOf(ORDINAL_KEY);
  const unplaced = new Set<number>();
  const ownWork = new Set<number>();
  if (ordinalKey < 0) return { kept: 0, own: ownWork, unplaced };
  const fn = new Map(profile.function.map((f) => [Number(f.id), f]));
  const loc = new Map(profile.location.map((l) => [Number(l.id), l]));
  const isJs = (line: Line) => isJavaScriptName(str(fn.get(Number(line.functionId))?.systemName ?? 0));
  const own = (line: Line) => isJs(line) && isOwnScript(str(fn.get(Number(line.functionId))?.filename ?? 0));
  // per location, not per frame: whether it holds JavaScript, and the profiler's own script
  const kinds = new Map<number, { js: boolean; own: boolean }>();
  const kindOf = (id: number | bigint) => {
    const n = Number(id);
    let k = kinds.get(n);
    if (!k) {
      const lines = loc.get(n)?.line ?? [];
      k = { js: lines.some(isJs), own: lines.some(own) };
      kinds.set(n, k);
    }
    return k;
  };
  let kept = 0;
  profile.sample = profile.sample.filter((s) => {
    const marker = s.label.findIndex((l) => Number(l.key) === ordinalKey);
    if (marker < 0) return true;
    const ordinal = Number(s.label[marker]!.num);
    s.label.splice(marker, 1);
    const first = s.locationId.findIndex((id) => kindOf(id).js);
    if (first < 0) {
      unplaced.add(ordinal);
      return false;
    }
    if (s.locationId.some((id) => kindOf(id).own)) {
      ownWork.add(ordinal);
      return false;
    }
    s.locationId = s.locationId.slice(first);
    kept++;
    return true;
  });
  return { kept, own: ownWork, unplaced };
}
