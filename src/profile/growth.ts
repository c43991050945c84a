/**
 * growth: where in-use memory grows, over profiles of one process in time order, telling
 * growth from sampling noise.
 *
 * Every figure here is the estimate of a set of samples (a function's cumulative figure, its
 * own memory, a chain of callers), and every slope and interval is computed the same way from
 * the set's figure Y and sampling variance V in each profile:
 *
 * A sample row of a sampled heap profile estimates count × size from n = count · q sampled
 * blocks, q = 1 − e^(−size/period), each weighted 1/q, so its Horvitz–Thompson variance is
 * count · q · size² (1 − q) / q² (size: the row's mean block size); rows are independent
 * within a profile, so a set's V is the sum over its rows.
 *
 * The slope is the least-squares one, b = Σ cᵢ Yᵢ with cᵢ = (tᵢ − t̄) / Σ (tⱼ − t̄)². The
 * profiles of one process share sampled blocks (a block sampled once stays in every later
 * profile while it lives), so the Yᵢ are correlated. Written over the steps between
 * profiles, b = Σₖ dₖ (Yₖ − Yₖ₋₁) with dₖ = Σ_{i≥k} cᵢ ≥ 0: a block contributes its weight
 * times (d at its allocation − d at its free), so a block alive through every profile adds
 * nothing, and since both d are ≥ 0, Var(b) ≤ Σₖ dₖ² (Aₖ + Fₖ), where Aₖ is the sampling
 * variance of the blocks allocated in step k and Fₖ that of the blocks freed in it. With the
 * allocated figures (alloc_space, alloc_objects: every profile of `run`, the handler and
 * startDumps has them) Aₖ is the growth of the allocated estimate's variance over the step
 * (an upper bound: it includes blocks allocated and freed within the step) and
 * Fₖ = max(0, Vₖ₋₁ + Aₖ − Vₖ). A row with in-use figures but no allocated ones (the
 * JavaScript heap's samples) has no Aₖ: a set holding one, like a set in profiles without
 * allocated figures, falls back to sd(b) ≤ Σ |cᵢ| √Vᵢ (Cauchy–Schwarz), which holds
 * whatever the correlations. Growth that is real but not linear (a cache that fills and
 * drains) shows in the residuals: with three profiles or more, the interval is the wider of
 * the sampling one (z = 1.96) and the regression's own t-interval. A set is significant when
 * the whole interval is above 0.
 *
 * What is ranked (docs/growth.md):
 *  - functions: each function's cumulative figure (everything beneath it, each function once
 *    per sample, as `top`'s cum): who is on the stack; root frames rank first there;
 *  - flat: each function's own memory (the samples whose leaf it is, `top`'s flat);
 *  - chains: where memory grows. Start from the samples of one leaf function and walk up
 *    the callers: while one caller carries the set's slope (what the other callers and the
 *    stacks that end there hold together is not significantly growing), the set narrows to
 *    that caller's samples and the caller joins the chain; where callers each carry a
 *    significant part and what the others hold is not significantly growing, the chain
 *    splits into one row per such caller (a leak beside a noisy or shrinking neighbour is
 *    followed alone; two leaks that meet in one allocator are two rows); else it stops. Each row is its deepest function "via" the callers that carry
 *    the same slope, so a leak under forty frames of event loop is one row, and two leaks
 *    that meet in one allocator are two.
 * JavaScript functions are keyed `name file:line` (their start line), so two functions of
 * one name never merge, whatever tier (interpreted, baseline, optimised) each frame ran in.
 */
import { join } from 'node:path';

import { ProfileMismatchError } from '../errors.js';
import { packageRoot } from '../preload/library.js';
import { isJavaScriptName } from '../symbolize/perfmap.js';
import { canonical, indexProfile, isZero, str, toNum, baseName, hex, type Profile, type ProfileIndex } from './model.js';

export interface GrowthRow {
  /** The function: `name file:line` for JavaScript functions, else its name (as top). */
  name: string;
  /** Least-squares slope of the figure, per second. */
  bytesPerSecond: number;
  /** The interval (95 % by default) around it. */
  low: number;
  high: number;
  /** low > 0: it grows by more than sampling noise and the fit's scatter explain. */
  significant: boolean;
  /** Its figure in the first and the last profile. */
  first: number;
  last: number;
  /** The function's own name, its file and (start) line when the profile has them. */
  function: string;
  file: string;
  line: number;
  /** A JavaScript function of the program (not Node's internals, not this package's). */
  program: boolean;
  /** Its figure in every profile of the fit, in time order. */
  series: number[];
}

export interface ChainRow extends GrowthRow {
  /** The callers that carry the same slope, innermost first (the deepest function is `name`). */
  via: string[];
  /** The deepest JavaScript function of the program in the chain (name or via), if any. */
  programFunction?: string;
}

export interface GrowthResult {
  /** Seconds since the first profile, per profile. */
  times: number[];
  /** The in-use total per profile. */
  totals: number[];
  /** The total's growth per second with its 95 % interval, fitted as each row is. */
  total: { bytesPerSecond: number; low: number; high: number; significant: boolean };
  sampleType: string;
  unit: string;
  /** Every function by its cumulative figure, fastest growth first (who is on the stack). */
  functions: GrowthRow[];
  /** Every function by its own memory (flat), fastest growth first. */
  flat: GrowthRow[];
  /** Where memory grows: the deepest function carrying a slope via its callers, fastest first. */
  chains: ChainRow[];
}

/** Two-sided 97.5 % quantiles of Student's t for 1…30 degrees of freedom. */
const T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069, 2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042];
const Z975 = 1.959964;

/** Horvitz–Thompson variance of a row estimating `count` blocks totalling `bytes`. */
export function rowVariance(bytes: number, count: number, period: number): number {
  if (!(period > 0 && count > 0 && bytes > 0)) return 0;
  const size = bytes / count;
  const q = -Math.expm1(-size / period);
  return (count * q * size * size * (1 - q)) / (q * q);
}

const OWN_SCRIPTS = join(packageRoot, 'dist') + '/';

/** A script of this package (the exit hook, the resident-set measurement): the profiler's work, not the program's. */
export function isProfilerScript(file: string): boolean {
  return file.startsWith(OWN_SCRIPTS) || file.startsWith(`file://${OWN_SCRIPTS}`);
}

/** What growth knows of a function key. */
interface KeyInfo {
  function: string;
  file: string;
  line: number;
  program: boolean;
  js: boolean;
}

/** One sample row, reduced: its frames' keys (leaf first) and its figures. */
interface Row {
  profile: number;
  keys: string[];
  y: number;
  v: number;
  /** Sampling variance of its allocated figure; NaN when the row has in-use but no allocated figures. */
  av: number;
}

/** A set's figures per profile. */
interface Series {
  y: number[];
  v: number[];
  av: number[];
}

/** Frame keys of one location, innermost (inlined) first, as model.frameNames names them. */
function locationKeys(ix: ProfileIndex, id: number | bigint, info: Map<string, KeyInfo>): string[] {
  const loc = ix.locations.get(canonical(id))!;
  const keys: string[] = [];
  for (const line of loc.line) {
    const f = ix.functions.get(canonical(line.functionId));
    const name = f ? str(ix.profile, f.name) : '';
    if (name === '') continue;
    const file = str(ix.profile, f!.filename);
    const start = toNum(f!.startLine) > 0 ? toNum(f!.startLine) : toNum(line.line);
    const js = isJavaScriptName(str(ix.profile, f!.systemName)) && file !== '';
    const key = js ? `${name} ${file}:${start}` : name;
    if (!info.has(key)) info.set(key, { function: name, file, line: start, js, program: js && !file.startsWith('node:') && !isProfilerScript(file) });
    keys.push(key);
  }
  if (keys.length > 0) return keys;
  const m = isZero(loc.mappingId) ? undefined : ix.mappings.get(canonical(loc.mappingId));
  const file = m ? str(ix.profile, m.filename) : '';
  const key = file !== '' ? `[${baseName(file)}]` : hex(loc.address);
  if (!info.has(key)) info.set(key, { function: key, file: '', line: 0, js: false, program: false });
  return [key];
}

/** The rows of one profile. */
function rowsOf(p: Profile, index: number, space: number, objects: number, alloc: [number, number] | undefined, info: Map<string, KeyInfo>): { rows: Row[]; total: number } {
  const ix = indexProfile(p);
  const period = toNum(p.period);
  const cache = new Map<string, string[]>();
  const rows: Row[] = [];
  let total = 0;
  for (const s of p.sample) {
    const y = toNum(s.value[space]!);
    const allocBytes = alloc ? toNum(s.value[alloc[0]]!) : 0;
    const av = alloc ? (y > 0 && allocBytes === 0 ? NaN : rowVariance(allocBytes, toNum(s.value[alloc[1]]!), period)) : 0;
    if (y === 0 && !(av > 0)) continue;
    total += y;
    const v = rowVariance(y, objects >= 0 ? toNum(s.value[objects]!) : 0, period);
    const keys: string[] = [];
    for (const id of s.locationId) {
      const k = String(canonical(id));
      let fr = cache.get(k);
      if (!fr) cache.set(k, (fr = locationKeys(ix, id, info)));
      keys.push(...fr);
    }
    rows.push({ profile: index, keys, y, v, av });
  }
  return { rows, total };
}

/** The fit of one set (see the file comment). */
interface Fit {
  slope: number;
  low: number;
  high: number;
  significant: boolean;
}

class Fitter {
  readonly n: number;
  private readonly c: number[];
  private readonly d: number[];
  private readonly tMean: number;
  private readonly sxx: number;
  constructor(
    readonly times: number[],
    readonly withAlloc: boolean,
  ) {
    const n = (this.n = times.length);
    this.tMean = times.reduce((a, b) => a + b, 0) / n;
    this.sxx = times.reduce((a, t) => a + (t - this.tMean) ** 2, 0);
    this.c = times.map((t) => (t - this.tMean) / this.sxx);
    // d[k] = Σ_{i≥k} c[i], the weight of step k (from profile k − 1 to k)
    this.d = this.c.map((_, k) => this.c.slice(k).reduce((a, b) => a + b, 0));
  }

  fit({ y, v, av }: Series): Fit {
    const { c, d, n, times } = this;
    const slope = c.reduce((a, ci, i) => a + ci * y[i]!, 0);
    let sampling = c.reduce((a, ci, i) => a + Math.abs(ci) * Math.sqrt(Math.max(0, v[i]!)), 0);
    if (this.withAlloc && av.every((x) => !Number.isNaN(x))) {
      let steps = 0;
      let usable = true;
      for (let k = 1; k < n; k++) {
        const allocated = av[k]! - av[k - 1]!;
        if (allocated < 0) usable = false; // reset or restarted in between: no step figures
        const a = Math.max(0, allocated);
        const freed = Math.max(0, v[k - 1]! + a - v[k]!);
        steps += d[k]! ** 2 * (a + freed);
      }
      if (usable) sampling = Math.min(sampling, Math.sqrt(steps));
    }
    let half = Z975 * sampling;
    if (n >= 3) {
      const yMean = y.reduce((a, b) => a + b, 0) / n;
      const intercept = yMean - slope * this.tMean;
      const rss = y.reduce((a, yi, i) => a + (yi - intercept - slope * times[i]!) ** 2, 0);
      const se = Math.sqrt(rss / (n - 2) / this.sxx);
      half = Math.max(half, (T975[n - 3] ?? Z975) * se);
    }
    // exact figures (no sampling, no scatter) of a set that does not move: no rounding crumbs
    return { slope, low: slope - half, high: slope + half, significant: slope - half > 1e-9 * Math.max(1, Math.abs(slope)) };
  }
}

function emptySeries(n: number): Series {
  return { y: new Array<number>(n).fill(0), v: new Array<number>(n).fill(0), av: new Array<number>(n).fill(0) };
}

function add(s: Series, r: Row): void {
  s.y[r.profile] = s.y[r.profile]! + r.y;
  s.v[r.profile] = s.v[r.profile]! + r.v;
  s.av[r.profile] = s.av[r.profile]! + r.av;
}

function seriesOf(rows: Row[], n: number): Series {
  const s = emptySeries(n);
  for (const r of rows) add(s, r);
  return s;
}

function minus(a: Series, b: Series): Series {
  return { y: a.y.map((x, i) => x - b.y[i]!), v: a.v.map((x, i) => Math.max(0, x - b.v[i]!)), av: a.av.map((x, i) => x - b.av[i]!) };
}

/**
 * Growth over `profiles` (any order: they are put in the order of their timeNanos, which
 * must differ). Throws ProfileMismatchError when there are fewer than two, when their times
 * are missing or equal, when one lacks the sample type, or when they are of several processes
 * (growthSeries groups those).
 */
export function growth(profiles: { profile: Profile; name: string }[], sampleType = 'inuse_space'): GrowthResult {
  if (profiles.length < 2) throw new ProfileMismatchError('growth needs at least two profiles of one process');
  const groups = groupByProcess(profiles.map((x) => ({ ...x, info: processInfo(x.profile) })));
  if (groups.length > 1) throw new ProfileMismatchError(`growth: the profiles are of ${groups.length} processes (${groups.map((g) => `${g.label}: ${g.members.length}`).join('; ')}); fit each one apart (growthSeries does)`);
  const timed = profiles.map((x) => ({ ...x, t: toNum(x.profile.timeNanos) / 1e9 }));
  for (const x of timed) if (!(x.t > 0)) throw new ProfileMismatchError(`${x.name} has no time (timeNanos): growth needs to know when each profile was taken`);
  timed.sort((a, b) => a.t - b.t);
  for (let i = 1; i < timed.length; i++) {
    if (timed[i]!.t === timed[i - 1]!.t) throw new ProfileMismatchError(`${timed[i - 1]!.name} and ${timed[i]!.name} were taken at the same time`);
  }
  let unit = '';
  let withAlloc = true;
  const info = new Map<string, KeyInfo>();
  const rows: Row[] = [];
  const totals: number[] = [];
  timed.forEach(({ profile: p, name }, index) => {
    const types = p.sampleType.map((t) => str(p, t.type));
    const space = types.indexOf(sampleType);
    if (space < 0) throw new ProfileMismatchError(`${name} has no ${sampleType} sample type (it has ${types.join(', ')})`);
    unit ||= str(p, p.sampleType[space]!.unit);
    const objectsName = sampleType.replace(/_space$/, '_objects');
    const allocSpace = types.indexOf(sampleType.replace(/^inuse_/, 'alloc_'));
    const allocObjects = types.indexOf(objectsName.replace(/^inuse_/, 'alloc_'));
    const alloc: [number, number] | undefined = sampleType === 'inuse_space' && allocSpace >= 0 && allocObjects >= 0 ? [allocSpace, allocObjects] : undefined;
    if (!alloc) withAlloc = false;
    const r = rowsOf(p, index, space, objectsName !== sampleType ? types.indexOf(objectsName) : -1, alloc, info);
    for (const x of r.rows) rows.push(x);
    totals.push(r.total);
  });
  const times = timed.map((x) => x.t - timed[0]!.t);
  const n = times.length;
  const fitter = new Fitter(times, withAlloc);
  const row = (key: string, s: Series): GrowthRow => {
    const f = fitter.fit(s);
    const k = info.get(key)!;
    return {
      name: key,
      bytesPerSecond: f.slope,
      low: f.low,
      high: f.high,
      significant: f.significant,
      first: s.y[0]!,
      last: s.y[n - 1]!,
      function: k.function,
      file: k.file,
      line: k.line,
      program: k.program,
      series: s.y,
    };
  };
  const order = (a: GrowthRow, b: GrowthRow) => b.bytesPerSecond - a.bytesPerSecond || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

  // cumulative (each function once per sample) and flat (the leaf)
  const cum = new Map<string, Series>();
  const flatSets = new Map<string, Row[]>();
  const seen = new Set<string>();
  for (const r of rows) {
    seen.clear();
    for (const k of r.keys) {
      if (seen.has(k)) continue;
      seen.add(k);
      let s = cum.get(k);
      if (!s) cum.set(k, (s = emptySeries(n)));
      add(s, r);
    }
    const leaf = r.keys[0];
    if (leaf !== undefined) (flatSets.get(leaf) ?? flatSets.set(leaf, []).get(leaf)!).push(r);
  }
  const functions = [...cum].map(([k, s]) => row(k, s)).sort(order);
  const flat = [...flatSets].map(([k, rs]) => row(k, seriesOf(rs, n))).sort(order);
  const chains = chainRows(
    flatSets,
    n,
    fitter,
    row,
    (k) => info.get(k)?.program === true,
    (k) => info.get(k)?.js === true,
  ).sort(order);
  const all = fitter.fit(seriesOf(rows, n));
  const total = { bytesPerSecond: all.slope, low: all.low, high: all.high, significant: all.significant };
  return { times, totals, total, sampleType, unit, functions, flat, chains };
}

/**
 * The chains (see the file comment): from each leaf's samples, up the callers while one
 * carries the set's slope; split where callers each carry a significant part and what the
 * others hold is not growing; stop otherwise. Where no caller carries the slope because the
 * runtime reached the same JavaScript function by several native paths (V8 calls an API
 * callback one way from interpreted code and another from optimised code), the callers are
 * compared at the nearest JavaScript frame instead, or else at the first JavaScript function
 * up the heaviest path, no further than its first function of the program's own, whose
 * samples carry the set alone (the paths differ further up where V8 inlined a function on one
 * of them), and the chain goes on from there (its via shows the
 * native frames of the path that holds the most). A set that does not grow
 * significantly follows only callers that all its samples share (a chain of identical
 * figures).
 */
function chainRows(flatSets: Map<string, Row[]>, n: number, fitter: Fitter, row: (key: string, s: Series) => GrowthRow, program: (key: string) => boolean, javascript: (key: string) => boolean): ChainRow[] {
  const out: ChainRow[] = [];
  const END = '\0end';
  interface Item {
    r: Row;
    /** Index of the next caller to look at in r.keys. */
    pos: number;
  }
  interface Part {
    k: string;
    items: Item[];
    s: Series;
    f: Fit;
    /** The frames the part adds to the via (the heaviest path's). */
    adds: string[];
  }
  const partition = (items: Item[], at: (it: Item) => number): { parts: Part[]; ended: boolean } => {
    const groups = new Map<string, { items: Item[]; heaviest: Item; weight: number }>();
    let ended = false;
    for (const it of items) {
      const i = at(it);
      if (i < 0 || i >= it.r.keys.length) {
        ended = true;
        continue;
      }
      const k = it.r.keys[i]!;
      const next = { r: it.r, pos: i + 1 };
      const g = groups.get(k);
      if (!g) groups.set(k, { items: [next], heaviest: it, weight: it.r.y });
      else {
        g.items.push(next);
        if (it.r.y > g.weight) [g.heaviest, g.weight] = [it, it.r.y];
      }
    }
    const parts = [...groups].map(([k, g]) => {
      const ps = seriesOf(
        g.items.map((x) => x.r),
        n,
      );
      return { k, items: g.items, s: ps, f: fitter.fit(ps), adds: g.heaviest.r.keys.slice(g.heaviest.pos, at(g.heaviest) + 1) };
    });
    parts.sort((x, y) => y.f.slope - x.f.slope);
    return { parts, ended };
  };
  /** The part that carries the set, or the parts that each carry some while nothing else grows. */
  const carriers = (s: Series, fit: Fit, parts: Part[]): Part[] => {
    if (parts.length === 0) return [];
    const best = parts[0]!;
    if (fit.significant && best.f.slope > 0 && !fitter.fit(minus(s, best.s)).significant) return [best];
    const carrying = parts.filter((x) => x.f.significant);
    if (carrying.length === 0) return [];
    let rest = s;
    for (const x of carrying) rest = minus(rest, x.s);
    return fitter.fit(rest).significant ? [] : carrying;
  };
  const walk = (items: Item[], via: string[], s: Series, fit: Fit): void => {
    const direct = partition(items, (it) => it.pos);
    if (direct.parts.length === 1 && !direct.ended) {
      const only = direct.parts[0]!;
      return walk(only.items, [...via, ...only.adds], s, fit);
    }
    let follow = carriers(s, fit, direct.parts);
    if (follow.length !== 1) {
      // compared at the nearest JavaScript frame above
      const atJs = partition(items, (it) => {
        for (let i = it.pos; i < it.r.keys.length; i++) if (javascript(it.r.keys[i]!)) return i;
        return -1;
      });
      const js = carriers(s, fit, atJs.parts);
      if (js.length === 1 || (js.length > 0 && follow.length === 0)) follow = js;
    }
    // The paths may differ in more than their nearest JavaScript frame (a function V8 inlined
    // on one of them, or reached through another builtin): the JavaScript functions up the
    // heaviest path, no further than its first function of the program's own, that carry the
    // set alone are where they join, and the one that holds the most of it is followed when
    // it holds more than the part followed so far (which left the rest, too small to carry
    // anything by itself, out of the row). Not past the program's first function: paths that
    // differ in the program's own code are two leaks.
    const heaviest = items.reduce((a, b) => (b.r.y > a.r.y ? b : a));
    let joined: Part | undefined;
    for (let i = heaviest.pos; i < heaviest.r.keys.length; i++) {
      const k = heaviest.r.keys[i]!;
      if (!javascript(k)) continue;
      const through = carriers(s, fit, partition(items, (it) => it.r.keys.indexOf(k, it.pos)).parts);
      if (through.length === 1 && (joined === undefined || through[0]!.f.slope > joined.f.slope)) joined = through[0]!;
      if (program(k)) break;
    }
    if (joined !== undefined && (follow.length !== 1 || joined.f.slope > follow[0]!.f.slope)) follow = [joined];
    if (follow.length > 0) {
      for (const x of follow) walk(x.items, [...via, ...x.adds], x.s, x.f);
      return;
    }
    const leaf = items[0]!.r.keys[0]!;
    const own = [leaf, ...via].find(program);
    out.push({ ...row(leaf, s), via, ...(own !== undefined ? { programFunction: own } : {}) });
  };
  for (const [, rs] of flatSets) {
    const s = seriesOf(rs, n);
    walk(
      rs.map((r) => ({ r, pos: 1 })),
      [],
      s,
      fitter.fit(s),
    );
  }
  return out;
}

/** What a profile records of the process it was taken of, and of what kind it is. */
export interface ProcessInfo {
  /** The recorded pid (every profile of this package records one). */
  pid?: number;
  /** The process's start, when recorded (`start_time=` in a comment). */
  start?: string;
  /** Its command line (`command: …`, run's exit profiles). */
  command?: string;
  /**
   * periodic: a profile taken while the process ran (run --every, startDumps, the handler);
   * exit: run's profile at the process's exit, after a full garbage collection;
   * peak: the in-use figures of the high-water mark, of an earlier moment than its time.
   */
  kind: 'periodic' | 'exit' | 'peak';
  /** The process's peak resident set when the profile was taken (never falls within a process). */
  peakRss?: number;
}

/** The process a profile was taken of, from its comments (see ProcessInfo). */
export function processInfo(p: Profile): ProcessInfo {
  const comments = p.comment.map((c) => str(p, c));
  const num = (key: string) => {
    const re = new RegExp(`(?:^|\\s)${key}=(\\d+)(?:\\s|$)`);
    for (const c of comments) {
      const m = re.exec(c);
      if (m) return Number(m[1]);
    }
    return undefined;
  };
  const pid = num('pid');
  const start = comments.map((c) => /(?:^|\s)start_time=(\S+)/.exec(c)?.[1]).find((x) => x !== undefined);
  const command = comments.find((c) => c.startsWith('command: '))?.slice('command: '.length);
  const peak = comments.some((c) => c.startsWith('peak: estimated_in_use_bytes='));
  const exit = comments.some((c) => /^mimalloc-pprof \S+ run: /.test(c));
  const peakRss = num('peak_rss');
  return {
    ...(pid !== undefined ? { pid } : {}),
    ...(start !== undefined ? { start } : {}),
    ...(command !== undefined ? { command } : {}),
    kind: peak ? 'peak' : exit ? 'exit' : 'periodic',
    ...(peakRss !== undefined ? { peakRss } : {}),
  };
}

export interface ProcessGroup<T> {
  pid?: number;
  /** `pid 4242`, `pid 4242 (a second process with this pid)`, `unknown process` */
  label: string;
  command?: string;
  members: T[];
}

/**
 * Profiles grouped by process: by recorded pid and, when recorded, start time; within one
 * pid without a start time, a periodic profile whose peak resident set is below the previous
 * one's starts a new process (a process's peak never falls: the pid was reused). Exit and
 * peak profiles join the process of their pid that was running before them. Profiles that
 * record no pid (another tool's) are taken as one process. Groups in order of first profile.
 */
export function groupByProcess<T extends { profile: Profile; info: ProcessInfo }>(items: T[]): ProcessGroup<T>[] {
  const time = (x: T) => toNum(x.profile.timeNanos);
  const sorted = [...items].sort((a, b) => time(a) - time(b));
  const groups: (ProcessGroup<T> & { key: string; lastRss?: number; firstTime: number })[] = [];
  const byPid = new Map<string, (typeof groups)[number][]>();
  for (const x of sorted.filter((y) => y.info.kind === 'periodic').concat(sorted.filter((y) => y.info.kind !== 'periodic'))) {
    const key = x.info.pid === undefined ? 'unknown' : `${x.info.pid}\0${x.info.start ?? ''}`;
    const same = byPid.get(key) ?? [];
    let g = same[same.length - 1];
    if (x.info.kind !== 'periodic') {
      g = [...same].reverse().find((c) => c.firstTime <= time(x)) ?? g;
    } else if (g && x.info.start === undefined && g.lastRss !== undefined && x.info.peakRss !== undefined && x.info.peakRss < g.lastRss) {
      g = undefined; // the peak resident set fell: another process with this pid
    }
    if (!g) {
      const nth = same.length;
      const label = x.info.pid === undefined ? 'unknown process' : `pid ${x.info.pid}${x.info.start !== undefined ? ` (started ${x.info.start})` : ''}${nth > 0 ? ` (process ${nth + 1} with this pid)` : ''}`;
      g = { key, label, members: [], firstTime: time(x), ...(x.info.pid !== undefined ? { pid: x.info.pid } : {}) };
      same.push(g);
      byPid.set(key, same);
      groups.push(g);
    }
    g.members.push(x);
    if (x.info.command !== undefined) g.command = x.info.command;
    if (x.info.kind === 'periodic' && x.info.peakRss !== undefined) g.lastRss = x.info.peakRss;
  }
  groups.sort((a, b) => a.firstTime - b.firstTime);
  return groups.map(({ label, members, pid, command }) => ({ label, members: members.sort((a, b) => time(a) - time(b)), ...(pid !== undefined ? { pid } : {}), ...(command !== undefined ? { command } : {}) }));
}

export interface SeriesProfile {
  name: string;
  kind: ProcessInfo['kind'];
  /** Seconds since the process's first profile. */
  time: number;
  /** Its in-use total of the sample type. */
  total: number;
  /** Whether it is one of the fit's points. */
  fitted: boolean;
}

export interface ProcessGrowth {
  pid?: number;
  label: string;
  command?: string;
  /** Every profile of the process in time order, fitted or not. */
  profiles: SeriesProfile[];
  /** The fit; undefined when fewer than two profiles could be fitted (`reason` says why). */
  result?: GrowthResult;
  reason?: string;
}

/**
 * growth for each process among `profiles` (groupByProcess). The exit profile (taken after a
 * full collection, a different kind of point than the periodic ones) is fitted only with
 * `includeExit`; a peak profile never is (its figures are of an earlier moment). Throws
 * ProfileMismatchError for a profile without a time or the sample type.
 */
export function growthSeries(profiles: { profile: Profile; name: string }[], options: { sampleType?: string; includeExit?: boolean } = {}): ProcessGrowth[] {
  const sampleType = options.sampleType ?? 'inuse_space';
  for (const x of profiles) if (!(toNum(x.profile.timeNanos) > 0)) throw new ProfileMismatchError(`${x.name} has no time (timeNanos): growth needs to know when each profile was taken`);
  const groups = groupByProcess(profiles.map((x) => ({ ...x, info: processInfo(x.profile) })));
  return groups.map((g) => {
    const fitted = g.members.filter((m) => m.info.kind === 'periodic' || (m.info.kind === 'exit' && options.includeExit === true));
    const t0 = toNum((fitted[0] ?? g.members[0]!).profile.timeNanos);
    const totalOf = (p: Profile, name: string) => {
      const i = p.sampleType.findIndex((t) => str(p, t.type) === sampleType);
      if (i < 0) throw new ProfileMismatchError(`${name} has no ${sampleType} sample type (it has ${p.sampleType.map((t) => str(p, t.type)).join(', ')})`);
      return p.sample.reduce((a, s) => a + toNum(s.value[i]!), 0);
    };
    const list: SeriesProfile[] = g.members.map((m) => ({ name: m.name, kind: m.info.kind, time: (toNum(m.profile.timeNanos) - t0) / 1e9, total: totalOf(m.profile, m.name), fitted: fitted.includes(m) }));
    const base = { label: g.label, ...(g.pid !== undefined ? { pid: g.pid } : {}), ...(g.command !== undefined ? { command: g.command } : {}), profiles: list };
    if (fitted.length < 2) {
      const kinds = g.members.filter((m) => !fitted.includes(m)).map((m) => m.info.kind);
      const reason = `${fitted.length} periodic profile${fitted.length === 1 ? '' : 's'}${kinds.length > 0 ? ` (and ${kinds.map((k) => `the ${k} profile`).join(', ')}, not fitted${kinds.includes('exit') ? ' without --include-exit' : ''})` : ''}: nothing to fit`;
      return { ...base, reason };
    }
    return { ...base, result: growth(fitted, sampleType) };
  });
}
