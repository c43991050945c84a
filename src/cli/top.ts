/**
 * `mimalloc-pprof top FILE`: the flat/cumulative table of one sample type, as
 * `go tool pprof -top` computes it (profile/top.ts), rendered with humanised bytes.
 * printTop is also the table `run` prints.
 */
import { UsageError } from '../errors.js';
import { findSampleType, sampleTypeNames, str, type Profile } from '../profile/model.js';
import { top, totalValue, type TopRow } from '../profile/top.js';
import {
  type Command,
  countArg,
  type Out,
  parseCommandArgs,
  readNamedProfile,
  SAMPLE_INDEXES,
  sampleIndexArg,
  type SampleIndexName,
  SOURCE_HELP,
  TOKEN_OPTION,
  sourceArgs,
} from './args.js';

export const TOP_HELP = `Usage: mimalloc-pprof top FILE [--sample-index TYPE] [-n N]
       mimalloc-pprof top --watch [SECONDS] URL

Prints the functions (or [binaries], or addresses, when the profile is not symbolised)
holding the most memory: flat = in the function itself, cum = in it and its callees.
FILE is a heap profile: profile.proto (gzipped or not) or gperftools heap_v2 text.
${SOURCE_HELP}

Options:
  --sample-index TYPE  ${SAMPLE_INDEXES.join('|')} (default inuse_space)
  -n, --count N        rows (default 10; with --watch 20)
  --watch [SECONDS]    a live endpoint's table, read and redrawn every SECONDS (default 2):
                       in use now, peak since the watch began, growth per minute with its
                       95 % interval over --window; keys on a terminal: s sort (growth, in
                       use, peak), t sample type (inuse_space, inuse_objects, alloc_space),
                       q quit; not on a terminal, one table per read
  --window MINUTES     how far back --watch fits growth (default 5)
  --token T            bearer token for a URL (default: MIMALLOC_PPROF_TOKEN)
  --timeout D          how long to wait for a URL's answer (default 60s; 500ms, 10s, 2m)
  -h, --help           this help
`;

const UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];

/** Bytes for humans: 512B, 12.5MiB, 1.21GiB (binary units, three significant digits). */
export function humanBytes(v: number): string {
  const a = Math.abs(v);
  if (a < 1024) return `${v}B`;
  let x = a;
  let u = -1;
  while (x >= 1024 && u < UNITS.length - 1) {
    x /= 1024;
    u++;
  }
  const digits = x < 10 ? 2 : x < 100 ? 1 : 0;
  const s = digits > 0 ? x.toFixed(digits).replace(/\.?0+$/, '') : x.toFixed(0);
  return `${v < 0 ? '-' : ''}${s}${UNITS[u]}`;
}

function pct(x: number): string {
  return `${x.toFixed(2)}%`;
}

/** The table: header lines, then one row per entry (flat, flat%, cum, cum%, name). */
export function formatTop(rows: readonly TopRow[], opts: { type: string; unit: string; total: number; entries: number; note?: string }): string {
  const fmt = opts.unit === 'bytes' ? humanBytes : (v: number) => String(v);
  const lines = [
    `Type: ${opts.type}${opts.note ? ` (${opts.note})` : ''}`,
    `Total: ${fmt(opts.total)}; showing ${rows.length} of ${opts.entries} entries`,
  ];
  const table = [['flat', 'flat%', 'cum', 'cum%', 'name'], ...rows.map((r) => [fmt(r.flat), pct(r.flatPct), fmt(r.cum), pct(r.cumPct), r.name])];
  const width = [0, 1, 2, 3].map((c) => Math.max(...table.map((row) => row[c]!.length)));
  for (const row of table) {
    lines.push(`${row.slice(0, 4).map((cell, c) => cell.padStart(width[c]!)).join('  ')}  ${row[4]}`);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The sample index of `name` in `p`; a UsageError naming what the profile has otherwise
 * (`what` names the profile in the message).
 */
export function resolveSampleIndex(p: Profile, name: SampleIndexName, what: string): number {
  const i = findSampleType(p, name);
  if (i >= 0) return i;
  const twoTypeHeap = sampleTypeNames(p).join() === 'objects/count,space/bytes';
  const hint = name.startsWith('alloc_') && twoTypeHeap
    ? '; heap_v2 text has allocation totals only when recorded with MIMALLOC_PROF_ACCUM=1 and something was freed'
    : '';
  throw new UsageError(`${what} has no ${name} sample type (it has ${sampleTypeNames(p).join(', ') || 'none'})${hint}`);
}

/** Renders the top `n` rows of `profile` for `sampleIndex` (a name or an index) to `out`. */
export function printTop(profile: Profile, sampleIndex: SampleIndexName | number, n: number, out: Out, note?: string, what = 'the profile'): void {
  const i = typeof sampleIndex === 'number' ? sampleIndex : resolveSampleIndex(profile, sampleIndex, what);
  const all = top(profile, i);
  const t = profile.sampleType[i]!;
  out.write(
    formatTop(all.slice(0, n), {
      type: typeof sampleIndex === 'string' ? sampleIndex : str(profile, t.type),
      unit: str(profile, t.unit),
      total: totalValue(profile, i),
      entries: all.length,
      ...(note ? { note } : {}),
    }),
  );
}

export const topCommand: Command = {
  summary: 'print the top allocation sites of a heap profile',
  async run(argv, io) {
    // --watch takes an optional number of seconds: `top --watch URL` is the URL, not the number
    const w = argv.indexOf('--watch');
    if (w >= 0 && !/^\d+(\.\d+)?$/.test(argv[w + 1] ?? '')) argv = [...argv.slice(0, w + 1), '2', ...argv.slice(w + 1)];
    const args = parseCommandArgs(
      'top',
      argv,
      { 'sample-index': { type: 'string' }, count: { type: 'string', short: 'n' }, watch: { type: 'string' }, window: { type: 'string' }, ...TOKEN_OPTION },
      { min: 1, max: 1, names: 'one FILE' },
    );
    if (!args) {
      io.out.write(TOP_HELP);
      return 0;
    }
    if (args.values.watch !== undefined) {
      const seconds = Number(args.values.watch);
      if (!(seconds >= 0.2 && seconds <= 3600)) throw new UsageError(`top: --watch takes seconds from 0.2 to 3600 (got ${String(args.values.watch)})`);
      const windowArg = args.values.window;
      const windowMin = windowArg === undefined ? 5 : Number(windowArg);
      if (!(windowMin > 0 && windowMin <= 24 * 60)) throw new UsageError(`top: --window takes minutes, more than 0 and at most 1440 (got ${String(windowArg)})`);
      const url = args.positionals[0]!;
      if (!/^https?:\/\//i.test(url)) throw new UsageError('top: --watch reads a live endpoint: give its http(s)://…/debug/pprof/heap URL');
      const { watch } = await import('./watch.js');
      return watch({
        url,
        read: sourceArgs('top', args.values),
        everyMs: seconds * 1000,
        windowMs: windowMin * 60_000,
        rows: countArg('top', args.values.count, 20),
        out: io.out as NonNullable<Parameters<typeof watch>[0]['out']>,
        input: process.stdin,
      });
    }
    const index = sampleIndexArg('top', args.values['sample-index']);
    const n = countArg('top', args.values.count, 10);
    const token = sourceArgs('top', args.values);
    const file = args.positionals[0]!;
    const profile = await readNamedProfile(file, token);
    printTop(profile, index, n, io.out, undefined, file);
    return 0;
  },
};
