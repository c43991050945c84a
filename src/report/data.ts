/**
 * The data of an HTML report: each profile reduced to what the page draws from, compactly.
 *
 *  - frames: one per distinct (name, file, line, kind); names are pprof's (`frameNames`), so
 *    the page's totals are `top`'s; JavaScript frames (named from V8's perf map) carry their
 *    script and line;
 *  - nodes: the stacks as a prefix tree (node 0 is the root; node i has a parent and a frame),
 *    so a stack shared by many samples is stored once;
 *  - samples: a node (the stack's leaf), one value per sample type, a label set.
 *
 * The page aggregates from these in the browser (filters and sample types change what it
 * sums); what does not change with them (the header, the growth over several profiles) is
 * computed here.
 */
import { isJavaScriptName } from '../symbolize/perfmap.js';
import { canonical, frameNames, indexProfile, str, toNum, type Profile } from '../profile/model.js';
import { growthSeries, isProfilerScript, processInfo, rowVariance, type ProcessGrowth } from '../profile/growth.js';
import { AT_THE_PEAK } from '../profile/peak.js';
import { parseRssBreakdown } from '../profile/rss.js';

export { isProfilerScript };

export interface ProfileData {
  /** The file (or URL) it came from. */
  source: string;
  /** What it is (periodic, exit, peak: profile/growth.ts) and the recorded pid. */
  kind: string;
  pid?: number;
  timeMs: number;
  durationMs: number;
  period: number;
  periodType: string;
  sampleTypes: { type: string; unit: string }[];
  /** Index of the sample type shown first. */
  defaultType: number;
  comments: string[];
  /** What a reader needs to trust the numbers, as label/value rows. */
  header: [string, string][];
  /** js: 0 native, 1 JavaScript, 2 JavaScript of this package (left out of the JavaScript table). */
  frames: { name: string[]; file: string[]; line: number[]; js: number[] };
  /** parent: node 0's is -1; in the page's data each node's is stored as `node − parent`
   * (mostly 1: a stack's nodes are made one after another), which packs smaller. */
  nodes: { parent: number[]; frame: number[] };
  samples: { node: number[]; values: number[][]; labels: number[] };
  /** Distinct label sets; samples refer to them by index. */
  labelSets: Record<string, string>[];
}

export interface GrowthData {
  /** The process (`pid 4242`) and its command line when recorded. */
  label: string;
  command?: string;
  /** ms since the first fitted profile, and the in-use total, per fitted profile. */
  times: number[];
  totals: number[];
  type: string;
  unit: string;
  /** Where memory grows (profile/growth.ts's chains), fastest first: the deepest function
   * carrying a slope and the callers with the same slope (innermost first), the slope per
   * second, its 95 % interval, whether it grows beyond sampling noise, its figure per profile. */
  functions: { name: string; via: string[]; program?: string; perSecond: number; low: number; high: number; significant: boolean; series: number[] }[];
  /** Profiles of the process left out of the fit (the exit profile, a peak profile): ms since the first fitted one, in-use total. */
  others: { source: string; kind: string; time: number; total: number }[];
}

export interface ReportData {
  title: string;
  generator: string;
  profiles: ProfileData[];
  /** One analysis per process with two profiles or more to fit (none for a single profile). */
  growth: GrowthData[];
  /** Processes among the profiles that could not be fitted, with the reason. */
  unfitted: string[];
}

const HEAP_TYPES = ['inuse_space', 'inuse_objects', 'alloc_space', 'alloc_objects'];

/** The comment lines our profiles carry, read back as header rows. */
function headerOf(p: Profile, comments: string[], source: string): [string, string][] {
  const rows: [string, string][] = [['profile', source]];
  const command = comments.find((c) => c.startsWith('command: '));
  const run = comments.map((c) => /\bpid=(\d+)/.exec(c)?.[1]).find((x) => x !== undefined);
  const program = command?.slice('command: '.length).split(' ')[0];
  if (program) rows.push(['program', program]);
  if (run) rows.push(['pid', run]);
  if (command) rows.push(['command line', command.slice('command: '.length)]);
  const time = toNum(p.timeNanos);
  if (time > 0) rows.push(['taken', new Date(time / 1e6).toISOString()]);
  const duration = toNum(p.durationNanos);
  if (duration > 0) rows.push(['duration', `${(duration / 1e9).toFixed(duration < 1e10 ? 2 : 0)} s`]);
  const period = toNum(p.period);
  if (period > 0) rows.push(['sampling interval', `${period} ${str(p, p.periodType?.unit ?? 0) || 'bytes'} (mean)`]);
  const blocks = sampledBlocks(p);
  rows.push(['samples', `${p.sample.length} stacks${blocks !== undefined ? `, about ${Math.round(blocks)} sampled blocks in use` : ''}`]);
  const rss = parseRssBreakdown(p);
  if (rss) {
    rows.push(['native in use (estimate)', `${bytes(rss.nativeInUse)} ± ${bytes(rss.nativeStdError)} (standard error)`]);
    if (rss.nativeExact !== undefined) rows.push(['native in use (exact counters)', bytes(rss.nativeExact)]);
    rows.push(['resident set', bytes(rss.rss)]);
    const parts: [string, number | undefined][] = [
      ['V8 and Node runtime', rss.runtime],
      ['allocator overhead', rss.allocatorOverhead],
      ['libraries', rss.libraries],
      ['profiler', rss.profiler],
      ['code', rss.code],
      ['stacks', rss.stacks],
      ['other', rss.other],
    ];
    rows.push(['resident set by part', parts.filter(([, v]) => v !== undefined).map(([k, v]) => `${k} ${bytes(v!)}`).join(', ')]);
    // the parts are never negative (profile/rss.ts): what they would have been below 0 is said
    if (rss.overcount) rows.push(['parts beyond the resident set', `${bytes(rss.overcount)} (counted by more than one part; other shown as 0)`]);
    if (rss.nativeNotResident) rows.push(['native in use not resident', `${bytes(rss.nativeNotResident)} (the estimate above mimalloc's resident memory; overhead shown as 0)`]);
  } else {
    const se = standardError(p);
    if (se !== undefined) rows.push(['estimate\'s standard error', `${bytes(se)} (of the in-use total, from the samples)`]);
  }
  for (const c of comments) {
    if (c.startsWith('heap=js: ')) rows.push(['JavaScript heap', c.slice('heap=js: '.length)]);
    if (c.startsWith(AT_THE_PEAK)) rows.push(['at the peak', c.slice(AT_THE_PEAK.length)]);
  }
  return rows;
}

/** How many sampled blocks the in-use figures stand on: Σ count × p per stack (see below). */
function sampledBlocks(p: Profile): number | undefined {
  const period = toNum(p.period);
  const types = p.sampleType.map((t) => str(p, t.type));
  const space = types.indexOf('inuse_space');
  const objects = types.indexOf('inuse_objects');
  if (period <= 0 || space < 0 || objects < 0) return undefined;
  let n = 0;
  for (const s of p.sample) {
    const bytesV = toNum(s.value[space]!);
    const count = toNum(s.value[objects]!);
    if (bytesV > 0 && count > 0) n += count * (1 - Math.exp(-bytesV / count / period));
  }
  return n;
}

/**
 * The in-use total's standard error, from the samples of a sampled heap profile: each stack's
 * figure estimates count × size from n = count × p sampled blocks, p = 1 − e^(−size/period),
 * whose Horvitz–Thompson variance is n · size² (1 − p) / p² (size: the stack's mean size).
 */
function standardError(p: Profile): number | undefined {
  const period = toNum(p.period);
  const types = p.sampleType.map((t) => str(p, t.type));
  const space = types.indexOf('inuse_space');
  const objects = types.indexOf('inuse_objects');
  if (period <= 0 || space < 0 || objects < 0) return undefined;
  let variance = 0;
  for (const s of p.sample) variance += rowVariance(toNum(s.value[space]!), toNum(s.value[objects]!), period);
  return Math.sqrt(variance);
}

function bytes(n: number): string {
  const a = Math.abs(n);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  let x = a;
  while (x >= 1024 && u < units.length - 1) {
    x /= 1024;
    u++;
  }
  return `${n < 0 ? '-' : ''}${u === 0 ? x : x.toFixed(x < 10 ? 2 : 1)} ${units[u]}`;
}

/** One profile's page data (see the file comment). */
export function profileData(p: Profile, source: string): ProfileData {
  const ix = indexProfile(p);
  const frameIds = new Map<string, number>();
  const frames = { name: [] as string[], file: [] as string[], line: [] as number[], js: [] as number[] };
  const frameOf = (name: string, file: string, line: number, js: boolean) => {
    const key = `${name}\0${file}\0${line}\0${js ? 1 : 0}`;
    let id = frameIds.get(key);
    if (id === undefined) {
      id = frames.name.length;
      frameIds.set(key, id);
      frames.name.push(name);
      frames.file.push(file);
      frames.line.push(line);
      frames.js.push(js ? (isProfilerScript(file) ? 2 : 1) : 0);
    }
    return id;
  };
  /** A location's frames, innermost first, aligned with frameNames. */
  const locationFrames = new Map<string, number[]>();
  const framesOf = (id: number | bigint) => {
    const key = String(canonical(id));
    let out = locationFrames.get(key);
    if (out) return out;
    const loc = ix.locations.get(canonical(id))!;
    const names = frameNames(ix, loc);
    const named = loc.line.filter((ln) => {
      const f = ix.functions.get(canonical(ln.functionId));
      return f !== undefined && str(p, f.name) !== '';
    });
    out = names.map((name, i) => {
      const ln = named.length === names.length ? named[i] : undefined;
      const f = ln ? ix.functions.get(canonical(ln.functionId)) : undefined;
      const js = f !== undefined && isJavaScriptName(str(p, f.systemName));
      const file = f ? str(p, f.filename) : '';
      const line = ln && toNum(ln.line) > 0 ? toNum(ln.line) : f ? toNum(f.startLine) : 0;
      return frameOf(name, file, line, js);
    });
    locationFrames.set(key, out);
    return out;
  };

  const parent: number[] = [-1];
  const frame: number[] = [-1];
  const children = new Map<string, number>();
  const labelSetIds = new Map<string, number>();
  const labelSets: Record<string, string>[] = [];
  const samples = { node: [] as number[], values: p.sampleType.map(() => [] as number[]), labels: [] as number[] };
  for (const s of p.sample) {
    if (s.value.every((v) => toNum(v) === 0)) continue;
    const path: number[] = [];
    for (const id of s.locationId) path.push(...framesOf(id));
    let node = 0;
    for (let i = path.length - 1; i >= 0; i--) {
      const key = `${node},${path[i]}`;
      let next = children.get(key);
      if (next === undefined) {
        next = parent.length;
        parent.push(node);
        frame.push(path[i]!);
        children.set(key, next);
      }
      node = next;
    }
    // string labels (thread, heap, pid…) are what the page filters by; numeric ones (a
    // sample's block size) would make a filter of every size
    const labels: Record<string, string> = {};
    for (const l of s.label) if (toNum(l.str) !== 0) labels[str(p, l.key)] = str(p, l.str);
    const lkey = JSON.stringify(Object.entries(labels).sort());
    let lid = labelSetIds.get(lkey);
    if (lid === undefined) {
      lid = labelSets.length;
      labelSetIds.set(lkey, lid);
      labelSets.push(labels);
    }
    samples.node.push(node);
    s.value.forEach((v, i) => samples.values[i]!.push(toNum(v)));
    samples.labels.push(lid);
  }
  const comments = p.comment.map((c) => str(p, c));
  const sampleTypes = p.sampleType.map((t) => ({ type: str(p, t.type), unit: str(p, t.unit) }));
  const named = str(p, p.defaultSampleType);
  let defaultType = sampleTypes.findIndex((t) => t.type === named);
  if (defaultType < 0) defaultType = sampleTypes.findIndex((t) => t.type === 'inuse_space' || t.type === 'space');
  if (defaultType < 0) defaultType = sampleTypes.length - 1;
  const info = processInfo(p);
  return {
    source,
    kind: info.kind,
    ...(info.pid !== undefined ? { pid: info.pid } : {}),
    timeMs: toNum(p.timeNanos) / 1e6,
    durationMs: toNum(p.durationNanos) / 1e6,
    period: toNum(p.period),
    periodType: p.periodType ? `${str(p, p.periodType.type)}/${str(p, p.periodType.unit)}` : '',
    sampleTypes,
    defaultType,
    comments,
    header: headerOf(p, comments, source),
    frames,
    nodes: { parent, frame },
    samples,
    labelSets,
  };
}

/**
 * Growth for each process among the profiles (profile/growth.ts: grouped by recorded pid,
 * the exit profile shown but not fitted; slopes with intervals that account for sampling
 * noise); processes whose profiles cannot be fitted are named in `unfitted`.
 */
function growthOf(profiles: { profile: Profile; source: string }[]): { growth: GrowthData[]; unfitted: string[] } {
  if (profiles.length < 2) return { growth: [], unfitted: [] };
  let series: ProcessGrowth[];
  try {
    series = growthSeries(profiles.map(({ profile, source }) => ({ profile, name: source })));
  } catch (e) {
    return { growth: [], unfitted: [e instanceof Error ? e.message : String(e)] };
  }
  const growth: GrowthData[] = [];
  const unfitted: string[] = [];
  for (const pg of series) {
    const g = pg.result;
    if (!g) {
      if (profiles.length > 1) unfitted.push(`${pg.label}: ${pg.reason}`);
      continue;
    }
    growth.push({
      label: pg.label,
      ...(pg.command !== undefined ? { command: pg.command } : {}),
      times: g.times.map((t) => t * 1000),
      totals: g.totals,
      type: g.sampleType,
      unit: g.unit,
      functions: g.chains.slice(0, 15).map((f) => ({
        name: f.name,
        via: f.via,
        ...(f.programFunction !== undefined ? { program: f.programFunction } : {}),
        perSecond: f.bytesPerSecond,
        low: f.low,
        high: f.high,
        significant: f.significant,
        series: f.series,
      })),
      others: pg.profiles.filter((p) => !p.fitted).map((p) => ({ source: p.name, kind: p.kind, time: p.time * 1000, total: p.total })),
    });
  }
  return { growth, unfitted };
}

/** The report's data: profiles in time order, and growth when there are several. */
export function reportData(profiles: { profile: Profile; source: string }[], generator: string): ReportData {
  const ordered = [...profiles].sort((a, b) => toNum(a.profile.timeNanos) - toNum(b.profile.timeNanos));
  const data = ordered.map(({ profile, source }) => profileData(profile, source));
  const title = data.length === 1 ? data[0]!.source : `${data.length} profiles`;
  return { title, generator, profiles: data, ...growthOf(ordered) };
}

export { HEAP_TYPES };
