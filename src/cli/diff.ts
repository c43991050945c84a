/** `mimalloc-pprof diff BASE NEW`: the top of NEW − BASE (profile/diff.ts). */
import { diff } from '../profile/diff.js';
import { type Command, countArg, parseCommandArgs, readNamedProfile, SAMPLE_INDEXES, sampleIndexArg, SOURCE_HELP, TOKEN_OPTION, sourceArgs } from './args.js';
import { printTop } from './top.js';

export const DIFF_HELP = `Usage: mimalloc-pprof diff BASE NEW [--sample-index TYPE] [-n N]

Prints the top of NEW − BASE: what grew (positive) or shrank (negative) between two heap
profiles of the same program. Stacks are matched by function names when the profiles are
symbolised, else by addresses within each binary (so different load addresses match).
Percentages are of the summed absolute change.
${SOURCE_HELP.replace('FILE may', 'BASE and NEW may each')}

Options:
  --sample-index TYPE  ${SAMPLE_INDEXES.join('|')} (default inuse_space)
  -n, --count N        rows (default 10)
  --token T            bearer token for URLs (default: MIMALLOC_PPROF_TOKEN)
  --timeout D          how long to wait for a URL's answer (default 60s; 500ms, 10s, 2m)
  -h, --help           this help
`;

export const diffCommand: Command = {
  summary: 'print the top of the difference of two heap profiles (NEW − BASE)',
  async run(argv, io) {
    const args = parseCommandArgs('diff', argv, { 'sample-index': { type: 'string' }, count: { type: 'string', short: 'n' }, ...TOKEN_OPTION }, { min: 2, max: 2, names: 'two files, BASE and NEW' });
    if (!args) {
      io.out.write(DIFF_HELP);
      return 0;
    }
    const index = sampleIndexArg('diff', args.values['sample-index']);
    const n = countArg('diff', args.values.count, 10);
    const [baseFile, nextFile] = args.positionals as [string, string];
    const token = sourceArgs('diff', args.values);
    const base = await readNamedProfile(baseFile, token);
    const next = await readNamedProfile(nextFile, token);
    const d = diff(base, next);
    printTop(d, index, n, io.out, `${nextFile} − ${baseFile}`, `the difference of ${nextFile} and ${baseFile}`);
    return 0;
  },
};
