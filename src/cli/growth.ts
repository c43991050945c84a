/**
 * `mimalloc-pprof growth FILE…`: the functions whose in-use memory grows, over profiles of
 * one process, with an interval that accounts for sampling noise (profile/growth.ts).
 */
import { UsageError } from '../errors.js';
import { growth } from '../profile/growth.js';
import { type Command, countArg, parseCommandArgs, readNamedProfile, SOURCE_HELP, TOKEN_OPTION, tokenArg } from './args.js';
import { humanBytes } from './top.js';

export const GROWTH_HELP = `Usage: mimalloc-pprof growth FILE… [--json] [-n N] [--sample-index TYPE] [--token T]

Ranks functions (cumulative, as top shows them) by how fast their in-use memory grows over
profiles of one process: periodic dumps (startDumps, MIMALLOC_PPROF_DUMP_DIR), a series of
/debug/pprof/heap answers, or any profiles with their time (timeNanos). Each slope comes
with a 95 % interval that accounts for the sampling variance of every estimate and for the
fit's scatter; "significant" means the whole interval is above 0, so a function whose
figure only jitters is not reported as growing. ${SOURCE_HELP}

Options:
  --json               {"functions":[{"name","bytesPerSecond","low","high","significant","first","last"}…],
                       "times":[…],"totals":[…]}, fastest growth first
  -n, --count N        rows of the text table (default 15)
  --sample-index TYPE  inuse_space (default) or inuse_objects
  --token T            bearer token for URLs (default: MIMALLOC_PPROF_TOKEN)
  -h, --help           this help
`;

export const growthCommand: Command = {
  summary: 'rank functions by in-use growth over profiles of one process, with intervals',
  async run(argv, io) {
    const args = parseCommandArgs(
      'growth',
      argv,
      { json: { type: 'boolean' }, count: { type: 'string', short: 'n' }, 'sample-index': { type: 'string' }, ...TOKEN_OPTION },
      { min: 2, max: 100000, names: 'two or more FILEs' },
    );
    if (!args) {
      io.out.write(GROWTH_HELP);
      return 0;
    }
    const type = args.values['sample-index'] ?? 'inuse_space';
    if (type !== 'inuse_space' && type !== 'inuse_objects') throw new UsageError(`growth: --sample-index must be inuse_space or inuse_objects (got ${String(type)})`);
    const n = countArg('growth', args.values.count, 15);
    const token = tokenArg('growth', args.values.token);
    const profiles = [];
    for (const source of args.positionals) profiles.push({ profile: await readNamedProfile(source, token), name: source });
    const g = growth(profiles, type);
    if (args.values.json === true) {
      io.out.write(`${JSON.stringify({ sampleType: g.sampleType, unit: g.unit, times: g.times, totals: g.totals, functions: g.functions })}\n`);
      return 0;
    }
    const fmt = g.unit === 'bytes' ? (v: number) => `${humanBytes(Math.round(v))}/s` : (v: number) => `${v.toFixed(1)}/s`;
    const span = g.times[g.times.length - 1]!;
    io.out.write(`Type: ${g.sampleType}; ${g.times.length} profiles over ${span.toFixed(1)} s; total ${g.unit === 'bytes' ? humanBytes(g.totals[0]!) : g.totals[0]} → ${g.unit === 'bytes' ? humanBytes(g.totals[g.totals.length - 1]!) : g.totals[g.totals.length - 1]}\n`);
    const rows = [['slope', '95% interval', '', 'function'], ...g.functions.slice(0, n).map((f) => [fmt(f.bytesPerSecond), `${fmt(f.low)} … ${fmt(f.high)}`, f.significant ? 'grows' : '', f.name])];
    const width = [0, 1, 2].map((c) => Math.max(...rows.map((r) => r[c]!.length)));
    for (const r of rows) io.out.write(`${r[0]!.padStart(width[0]!)}  ${r[1]!.padStart(width[1]!)}  ${r[2]!.padEnd(width[2]!)}  ${r[3]}\n`);
    return 0;
  },
};
