/**
 * `mimalloc-pprof growth FILE…`: where in-use memory grows, over the profiles of each process,
 * with intervals that account for sampling noise (profile/growth.ts, docs/growth.md).
 */
import { ProfileMismatchError, UsageError } from '../errors.js';
import { growthSeries, type ChainRow, type GrowthResult, type GrowthRow, type ProcessGrowth } from '../profile/growth.js';
import { type Command, countArg, parseCommandArgs, readNamedProfile, SOURCE_HELP, TOKEN_OPTION, sourceArgs, type Out } from './args.js';
import { humanBytes } from './top.js';

export const GROWTH_HELP = `Usage: mimalloc-pprof growth FILE… [--json] [-n N] [--include-exit] [--sample-index TYPE] [--token T]

Where memory grows over the profiles of a process: periodic profiles (run --every,
startDumps, MIMALLOC_PPROF_DUMP_DIR), a series of /debug/pprof/heap answers, or any
profiles with their time (timeNanos). Two rankings, fastest growth first:
  where it grows  each row is the deepest function that carries a slope, "via" the
                  callers that carry the same slope (a leak under forty frames of event
                  loop is one row, named where it is allocated and by whom)
  own memory      each function's own (flat) memory, as top's flat
JavaScript functions are "name file:line". Each slope comes with a 95 % interval that
accounts for the sampling variance of every estimate and for the fit's scatter; "grows"
means the whole interval is above 0, so a figure that only jitters is not called growing.

Profiles are grouped by process (the pid each records; a fall of the recorded peak RSS
means a new process with the same pid): one analysis per process. The exit profile of
run (taken after a full garbage collection) and a peak profile are listed as what they
are and left out of the fit; --include-exit fits the exit profile too. ${SOURCE_HELP}

Options:
  --json               one process: {"sampleType","unit","times","totals","functions","flat",
                       "chains","process","profiles"}; several: {"processes":[…each that…]}.
                       Rows: {"name","bytesPerSecond","low","high","significant","first",
                       "last","function","file","line","program","series"}, chains also
                       {"via":[…],"programFunction"}; "functions" is the cumulative ranking
  -n, --count N        rows of each text table (default 10)
  --include-exit       fit the exit profile with the periodic ones
  --sample-index TYPE  inuse_space (default) or inuse_objects
  --token T            bearer token for URLs (default: MIMALLOC_PPROF_TOKEN)
  --timeout D          how long to wait for a URL's answer (default 60s; 500ms, 10s, 2m)
  -h, --help           this help
`;

/**
 * The callers of a chain as one line: the direct caller, the program's JavaScript functions
 * (up to three), the outermost, with … where callers are left out.
 */
export function viaText(via: readonly string[], isProgram: (name: string) => boolean): string {
  if (via.length === 0) return '';
  const keep = new Set<number>([0, via.length - 1]);
  let programs = 0;
  via.forEach((v, i) => {
    if (programs < 3 && isProgram(v)) {
      keep.add(i);
      programs++;
    }
  });
  const parts: string[] = [];
  let last = -1;
  for (const i of [...keep].sort((a, b) => a - b)) {
    if (i > last + 1) parts.push('…');
    parts.push(via[i]!);
    last = i;
  }
  return `via ${parts.join(' ← ')}${keep.size < via.length ? ` (${via.length} callers)` : ''}`;
}

function table(out: Out, rows: string[][]): void {
  const width = [0, 1, 2].map((c) => Math.max(...rows.map((r) => r[c]!.length)));
  for (const r of rows) out.write(`${r[0]!.padStart(width[0]!)}  ${r[1]!.padStart(width[1]!)}  ${r[2]!.padEnd(width[2]!)}  ${r[3]}\n`.replace(/ +\n$/, '\n'));
}

function printProcess(out: Out, pg: ProcessGrowth, n: number, several: boolean, type: string): void {
  const g = pg.result;
  const unit = g?.unit ?? (type.endsWith('_space') ? 'bytes' : 'count');
  const amount = (v: number) => (unit === 'bytes' ? humanBytes(Math.round(v)) : String(Math.round(v)));
  const rate = (v: number) => `${amount(v)}/s`;
  const fitted = pg.profiles.filter((p) => p.fitted);
  const head = `${pg.label}${pg.command ? ` (${pg.command.length > 80 ? `${pg.command.slice(0, 77)}...` : pg.command})` : ''}`;
  if (several) out.write(`== ${head}\n`);
  if (!g) {
    out.write(`${several ? '' : `${head}: `}${pg.reason}\n`);
  } else {
    const span = g.times[g.times.length - 1]!;
    out.write(`${several ? '' : `${head}: `}${fitted.length} profiles over ${span.toFixed(1)} s; ${g.sampleType} ${amount(g.totals[0]!)} → ${amount(g.totals[g.totals.length - 1]!)}\n`);
  }
  for (const p of pg.profiles.filter((x) => x.kind !== 'periodic')) {
    const what = p.kind === 'exit' ? 'exit profile (taken at exit, after a full garbage collection)' : 'peak profile (in-use figures of the high-water mark)';
    out.write(`  ${what} ${p.name}, ${p.time.toFixed(1)} s after the first: ${amount(p.total)} in use; ${p.fitted ? 'fitted (--include-exit)' : p.kind === 'exit' ? 'not fitted (--include-exit fits it)' : 'not fitted'}\n`);
  }
  if (!g) return;
  const program = new Set(g.functions.filter((f) => f.program).map((f) => f.name));
  const chainName = (c: ChainRow) => {
    const via = viaText(c.via, (x) => program.has(x));
    return via ? `${c.name} ${via}` : c.name;
  };
  const cells = (f: GrowthRow, name: string) => [rate(f.bytesPerSecond), `${rate(f.low)} … ${rate(f.high)}`, f.significant ? 'grows' : '', name];
  out.write('\nWhere memory grows (the deepest function that carries a slope, via the callers with the same slope)\n');
  table(out, [['slope', '95% interval', '', 'function'], ...g.chains.slice(0, n).map((c) => cells(c, chainName(c)))]);
  out.write('\nOwn memory (flat)\n');
  table(out, [['slope', '95% interval', '', 'function'], ...g.flat.slice(0, n).map((f) => cells(f, f.name))]);
}

/** One process's JSON: growth's result (as before) with the process and its profiles. */
function processJson(pg: ProcessGrowth): Record<string, unknown> {
  const process = { label: pg.label, ...(pg.pid !== undefined ? { pid: pg.pid } : {}), ...(pg.command !== undefined ? { command: pg.command } : {}) };
  const g: GrowthResult | undefined = pg.result;
  return {
    ...(g ? { sampleType: g.sampleType, unit: g.unit, times: g.times, totals: g.totals, functions: g.functions, flat: g.flat, chains: g.chains } : { reason: pg.reason }),
    process,
    profiles: pg.profiles,
  };
}

export const growthCommand: Command = {
  summary: 'where in-use memory grows over the profiles of each process, with intervals',
  async run(argv, io) {
    const args = parseCommandArgs(
      'growth',
      argv,
      { json: { type: 'boolean' }, count: { type: 'string', short: 'n' }, 'include-exit': { type: 'boolean' }, 'sample-index': { type: 'string' }, ...TOKEN_OPTION },
      { min: 2, max: 100000, names: 'two or more FILEs' },
    );
    if (!args) {
      io.out.write(GROWTH_HELP);
      return 0;
    }
    const type = args.values['sample-index'] ?? 'inuse_space';
    if (type !== 'inuse_space' && type !== 'inuse_objects') throw new UsageError(`growth: --sample-index must be inuse_space or inuse_objects (got ${String(type)})`);
    const n = countArg('growth', args.values.count, 10);
    const token = sourceArgs('growth', args.values);
    const profiles = [];
    for (const source of args.positionals) profiles.push({ profile: await readNamedProfile(source, token), name: source });
    const analyses = growthSeries(profiles, { sampleType: type, includeExit: args.values['include-exit'] === true });
    if (!analyses.some((a) => a.result)) {
      throw new ProfileMismatchError(`growth: no process has two profiles to fit (${analyses.map((a) => `${a.label}: ${a.reason}`).join('; ')})`);
    }
    if (args.values.json === true) {
      const json = analyses.length === 1 ? processJson(analyses[0]!) : { processes: analyses.map(processJson) };
      io.out.write(`${JSON.stringify(json)}\n`);
      return 0;
    }
    if (analyses.length > 1) io.out.write(`${analyses.length} processes among the profiles: one analysis each\n\n`);
    analyses.forEach((a, i) => {
      if (i > 0) io.out.write('\n');
      printProcess(io.out, a, n, analyses.length > 1, type);
    });
    return 0;
  },
};
