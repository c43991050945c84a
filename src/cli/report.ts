/**
 * `mimalloc-pprof report FILE… [-o report.html]`: one offline HTML file with a flame graph,
 * the top tables, label filters and, for several profiles of one process, their growth
 * (src/report/).
 */
import { writeHtmlReport } from '../report/index.js';
import { type Command, parseCommandArgs, readNamedProfile, SOURCE_HELP, TOKEN_OPTION, sourceArgs } from './args.js';

export const REPORT_HELP = `Usage: mimalloc-pprof report FILE… [-o report.html] [--token T]

Writes one self-contained HTML file (no network request of any kind; opens from file://):
a flame graph of the profile with zoom, search and hover details, the top functions (flat
and cumulative, sortable), the JavaScript functions with memory beneath them, filters by
label (thread, heap, pid), and the numbers a reader needs to trust it. Given several
profiles of one process (periodic dumps, a series), also how the total and the fastest-
growing functions changed over time. Reads any pprof heap profile, gzipped or not, and
heap_v2 text. ${SOURCE_HELP}

Options:
  -o, --out FILE  where to write (default report.html)
  --token T       bearer token for URLs (default: MIMALLOC_PPROF_TOKEN)
  --timeout D     how long to wait for a URL's answer (default 60s; 500ms, 10s, 2m)
  -h, --help      this help
`;

export const reportCommand: Command = {
  summary: 'write a self-contained HTML report (flame graph, top tables, growth) of profiles',
  async run(argv, io) {
    const args = parseCommandArgs('report', argv, { out: { type: 'string', short: 'o' }, ...TOKEN_OPTION }, { min: 1, max: 1000, names: 'one or more FILEs' });
    if (!args) {
      io.out.write(REPORT_HELP);
      return 0;
    }
    const token = sourceArgs('report', args.values);
    const out = typeof args.values.out === 'string' && args.values.out !== '' ? args.values.out : 'report.html';
    const profiles = [];
    for (const source of args.positionals) profiles.push({ profile: await readNamedProfile(source, token), source });
    writeHtmlReport(out, profiles);
    io.err.write(`mimalloc-pprof: wrote ${out}\n`);
    return 0;
  },
};
