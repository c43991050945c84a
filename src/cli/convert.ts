/**
 * `mimalloc-pprof convert IN OUT`: heap_v2 text ↔ profile.proto. The input format is
 * detected (parseProfile); the output format follows OUT's extension (OUTPUT_FORMATS).
 */
import { UsageError } from '../errors.js';
import { encodeHeapText } from '../profile/heap-text.js';
import { encodeProfile } from '../profile/proto.js';
import type { Profile } from '../profile/model.js';
import { type Command, parseCommandArgs, SOURCE_HELP, TOKEN_OPTION, tokenArg, writeFileAtomic } from './args.js';
import { readProfile } from '../profile/files.js';

export type OutputFormat = 'heap_v2' | 'proto';

/** Output extensions and their formats (longest match first). */
export const OUTPUT_FORMATS: readonly (readonly [string, OutputFormat])[] = [
  ['.pb.gz', 'proto'],
  ['.pprof', 'proto'],
  ['.pb', 'proto'],
  ['.heap', 'heap_v2'],
  ['.txt', 'heap_v2'],
];

const ENCODERS: Record<OutputFormat, (p: Profile, name: string) => Uint8Array | string> = {
  proto: (p) => encodeProfile(p, { gzip: true }),
  heap_v2: (p, name) => encodeHeapText(p, name),
};

export const CONVERT_HELP = `Usage: mimalloc-pprof convert IN OUT

Converts a heap profile between gperftools heap_v2 text and profile.proto. IN's format is
detected (proto, gzipped or not, or heap text); OUT's extension picks the output:
  .pb.gz, .pb, .pprof  gzipped profile.proto
  .heap, .txt          heap_v2 text (addresses and mappings only: function names are
                       dropped; values are re-sampled to the profile's period)

${SOURCE_HELP.replace('FILE may', 'IN may')}

Options:
  --token T   bearer token for a URL (default: MIMALLOC_PPROF_TOKEN)
  -h, --help  this help
`;

export function outputFormat(path: string): OutputFormat {
  const lower = path.toLowerCase();
  const hit = OUTPUT_FORMATS.find(([ext]) => lower.endsWith(ext));
  if (!hit) {
    throw new UsageError(`convert: cannot tell the output format from ${path} (use one of ${OUTPUT_FORMATS.map(([e]) => e).join(', ')})`);
  }
  return hit[1];
}

export const convertCommand: Command = {
  summary: 'convert a heap profile between heap_v2 text and profile.proto',
  async run(argv, io) {
    const args = parseCommandArgs('convert', argv, { ...TOKEN_OPTION }, { min: 2, max: 2, names: 'two files, IN and OUT' });
    if (!args) {
      io.out.write(CONVERT_HELP);
      return 0;
    }
    const [input, output] = args.positionals as [string, string];
    const format = outputFormat(output);
    const token = tokenArg('convert', args.values.token);
    const profile = await readProfile(input, token === undefined ? {} : { token });
    writeFileAtomic(output, ENCODERS[format](profile, input));
    return 0;
  },
};
