/**
 * `mimalloc-pprof top --watch [SECONDS] URL`: a live table of a running service's memory by
 * function, from its /debug/pprof endpoint, redrawn every SECONDS (default 2).
 *
 * Each refresh reads one profile; each sample is charged to the deepest JavaScript function of
 * the program on its stack, else to its native allocation site (src/profile/holders.ts), and
 * the profiles of the last `window` seconds (default 5 min) are fitted per function (src/profile/growth.ts: the least-squares slope with its 95 %
 * interval, the same fit as `growth`), so a row has the function's figure now, its peak since
 * the watch began, and its growth per minute with the interval. JavaScript functions are
 * `name file:line`. A profile of another process (the service restarted) starts the window
 * anew. On a terminal the table is redrawn in place and keys switch it: `s` the sort (growth,
 * in use, peak), `t` the sample type (inuse_space, inuse_objects, alloc_space), `q` or Ctrl-C
 * quits. Not on a terminal, one table per refresh is printed, one after the other.
 */
import type { Profile } from '../profile/model.js';
import type { ReadOptions } from '../profile/files.js';

import { growth, processInfo, type GrowthRow } from '../profile/growth.js';
import { cutToProgramFunctions } from '../profile/holders.js';
import { findSampleType } from '../profile/model.js';
import { totalValue } from '../profile/top.js';
import { readNamedProfile } from './args.js';
import { humanBytes } from './top.js';

export const SORTS = ['growth', 'inuse', 'peak'] as const;
export const TYPES = ['inuse_space', 'inuse_objects', 'alloc_space'] as const;
export type WatchSort = (typeof SORTS)[number];
export type WatchType = (typeof TYPES)[number];

export interface WatchOptions {
  url: string;
  read: ReadOptions;
  everyMs: number;
  windowMs: number;
  rows: number;
  out: { write(s: string): unknown; isTTY?: boolean; rows?: number; columns?: number };
  input?: NodeJS.ReadStream;
  /** Stop after this many refreshes (tests); default: until q, Ctrl-C or SIGTERM. */
  refreshes?: number;
  /** Ends the watch (run --live: the program ended). */
  signal?: AbortSignal;
  /** What Ctrl-C does instead of ending the watch (run --live: SIGINT to the program). */
  interrupt?: () => void;
  /** A line above the table. */
  banner?: string;
}

interface Snapshot {
  profile: Profile;
  at: number;
  process: string;
}

/** One watched series and what the table shows of it. */
export class Watch {
  snapshots: Snapshot[] = [];
  sort: WatchSort = 'growth';
  type: WatchType = 'inuse_space';
  peaks = new Map<string, number>();
  peakTotal = 0;
  error: string | undefined;

  constructor(readonly windowMs: number) {}

  add(profile: Profile, at: number): void {
    const info = processInfo(profile);
    const process = `${info.pid ?? '?'}:${info.start ?? '?'}`;
    if (this.snapshots.length > 0 && this.snapshots[this.snapshots.length - 1]!.process !== process) {
      // another process answers now (a restart): its series starts here
      this.snapshots = [];
      this.peaks.clear();
      this.peakTotal = 0;
    }
    this.snapshots.push({ profile: cutToProgramFunctions(profile), at, process });
    this.snapshots = this.snapshots.filter((s) => s.at >= at - this.windowMs);
  }

  /** The table's rows for the current sort and sample type; `total`: the latest total, its peak and growth. */
  table(n: number): { rows: (GrowthRow & { peak: number })[]; total: { now: number; peak: number; perMinute?: [number, number, number] }; unit: string; note?: string } {
    const last = this.snapshots[this.snapshots.length - 1];
    if (!last) return { rows: [], total: { now: 0, peak: 0 }, unit: '', note: 'no profile yet' };
    const at = findSampleType(last.profile, this.type);
    if (at < 0) return { rows: [], total: { now: 0, peak: 0 }, unit: '', note: `the profile has no ${this.type}` };
    const unit = this.type.endsWith('_objects') ? 'objects' : 'bytes';
    const now = totalValue(last.profile, at);
    let rows: (GrowthRow & { peak: number })[] = [];
    let perMinute: [number, number, number] | undefined;
    let note: string | undefined;
    if (this.snapshots.length >= 2) {
      const g = growth(
        this.snapshots.map((s, i) => ({ profile: s.profile, name: `#${i}` })),
        this.type,
      );
      // each row a function holding memory: the deepest JavaScript function of the program on
      // a sample's stack, else its native allocation site (the profiles are cut so, at add)
      rows = g.flat.map((r) => ({ ...r, peak: Math.max(this.peaks.get(`${this.type}\0${r.name}`) ?? 0, ...r.series) }));
      for (const r of rows) this.peaks.set(`${this.type}\0${r.name}`, r.peak);
      perMinute = [g.total.bytesPerSecond * 60, g.total.low * 60, g.total.high * 60];
    } else {
      note = 'growth: from the second profile on';
    }
    this.peakTotal = Math.max(this.peakTotal, now);
    const key: Record<WatchSort, (r: GrowthRow & { peak: number }) => number> = { growth: (r) => r.bytesPerSecond, inuse: (r) => r.last, peak: (r) => r.peak };
    rows = rows.filter((r) => r.last !== 0 || r.peak !== 0 || r.bytesPerSecond !== 0);
    rows.sort((a, b) => key[this.sort](b) - key[this.sort](a) || a.name.localeCompare(b.name));
    return { rows: rows.slice(0, n), total: { now, peak: this.peakTotal, ...(perMinute ? { perMinute } : {}) }, unit, ...(note ? { note } : {}) };
  }
}

function amount(v: number, unit: string): string {
  return unit === 'bytes' ? humanBytes(Math.round(v)) : String(Math.round(v));
}

function rate(v: number, unit: string): string {
  return `${v < 0 ? '-' : '+'}${amount(Math.abs(v), unit)}`;
}

/** The table as text: a header, then one row a function. */
export function render(w: Watch, url: string, rows: number, width = 120): string {
  const t = w.table(rows);
  const lines: string[] = [];
  const stamp = new Date().toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  lines.push(`mimalloc-pprof top --watch ${url}   ${stamp}`);
  const window = w.snapshots.length >= 2 ? `${((w.snapshots[w.snapshots.length - 1]!.at - w.snapshots[0]!.at) / 1000).toFixed(0)} s, ${w.snapshots.length} profiles` : `${w.snapshots.length} profile`;
  const growthText = t.total.perMinute ? `, growth ${rate(t.total.perMinute[0], t.unit)}/min [${rate(t.total.perMinute[1], t.unit)}, ${rate(t.total.perMinute[2], t.unit)}]` : '';
  lines.push(`${w.type}: ${amount(t.total.now, t.unit)} now, peak ${amount(t.total.peak, t.unit)}${growthText}   (window ${window})`);
  lines.push(`sort: ${w.sort}   keys: s sort (growth, inuse, peak)  t type (inuse_space, inuse_objects, alloc_space)  q quit`);
  if (w.error) lines.push(`last read failed: ${w.error}`);
  if (t.note) lines.push(t.note);
  lines.push('');
  lines.push(`${'now'.padStart(10)} ${'peak'.padStart(10)} ${'growth/min'.padStart(11)} ${'95 % interval'.padStart(24)}  function`);
  for (const r of t.rows) {
    const interval = `[${rate(r.low * 60, t.unit)}, ${rate(r.high * 60, t.unit)}]`;
    const line = `${amount(r.last, t.unit).padStart(10)} ${amount(r.peak, t.unit).padStart(10)} ${rate(r.bytesPerSecond * 60, t.unit).padStart(11)} ${interval.padStart(24)}${r.significant ? '*' : ' '} ${r.name}`;
    lines.push(line.length > width ? `${line.slice(0, width - 1)}…` : line);
  }
  lines.push('');
  lines.push('*: grows: the 95 % interval of its growth lies above 0 (beyond what sampling noise and the fit\'s error explain)');
  return `${lines.join('\n')}\n`;
}

/** Runs the watch until q, Ctrl-C, SIGTERM or `refreshes`. Returns the exit status. */
export async function watch(opts: WatchOptions): Promise<number> {
  const w = new Watch(opts.windowMs);
  const tty = opts.out.isTTY === true;
  const input = opts.input;
  let stop: () => void = () => {};
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  opts.signal?.addEventListener('abort', () => stop());
  if (opts.signal?.aborted) stop();
  const redraw = () => {
    const rows = tty && opts.out.rows ? Math.max(3, Math.min(opts.rows, opts.out.rows - 10)) : opts.rows;
    const text = (opts.banner ? `${opts.banner}\n` : '') + render(w, opts.url, rows, tty && opts.out.columns ? opts.out.columns : 160);
    opts.out.write(tty ? `\x1b[H\x1b[2J${text}` : `${text}\n`);
  };
  const onKey = (data: Buffer) => {
    const k = data.toString('utf8');
    if (k === '\x03' && opts.interrupt) opts.interrupt();
    else if (k === 'q' || k === '\x03') stop();
    else if (k === 's') {
      w.sort = SORTS[(SORTS.indexOf(w.sort) + 1) % SORTS.length]!;
      redraw();
    } else if (k === 't') {
      w.type = TYPES[(TYPES.indexOf(w.type) + 1) % TYPES.length]!;
      redraw();
    }
  };
  const raw = tty && input?.isTTY === true;
  if (raw) {
    input!.setRawMode(true);
    input!.resume();
    input!.on('data', onKey);
  }
  const onSignal = () => stop();
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  let n = 0;
  try {
    for (;;) {
      try {
        w.add(await readNamedProfile(opts.url, opts.read), Date.now());
        w.error = undefined;
      } catch (e) {
        w.error = e instanceof Error ? e.message : String(e);
      }
      redraw();
      n++;
      if (opts.refreshes !== undefined && n >= opts.refreshes) break;
      const timer = new Promise<'tick'>((r) => setTimeout(() => r('tick'), opts.everyMs));
      if ((await Promise.race([timer, stopped.then(() => 'stop' as const)])) === 'stop') break;
    }
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    if (raw) {
      input!.off('data', onKey);
      input!.setRawMode(false);
      input!.pause();
    }
  }
  return 0;
}
