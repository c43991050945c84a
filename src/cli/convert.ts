/**
 * `mimalloc-pprof convert IN OUT`: heap_v2 text ↔ profile.proto. The input format is
 * detected (parseProfile); the output format follows OUT's extension (OUTPUT_FORMATS).
 */
import { UsageError } from '../errors.js';
import { formatOfName, OUTPUT_FORMATS, type OutputFormat } from '../profile/extensions.js';
import { encodeHeapText } from '../profile/heap-text.js';
import { encodeProfile } from '../profile/proto.js';
import type { Profile } from '../profile/model.js';
import { type Command, parseCommandArgs, SOURCE_HELP, TOKEN_OPTION, sourceArgs, writeFileAtomic } from './args.js';
import { readProfile } from '../profile/files.js';
import { humanBytes } from './top.js';

const ENCODERS: Record<OutputFormat, (p: Profile, name: string) => Uint8Array | string> = {
  proto: (p) => encodeProfile(p, { gzip: true }),
  heap_v2: (p, name) => encodeHeapText(p, name),
};

/**
 * `p` without its JavaScript-heap samples (`heap=js`: V8's objects, which have functions but
 * no addresses; heap_v2 text, a list of native addresses, would show each as a `0x0` row),
 * how many were left out and the in-use bytes they held.
 */
export function withoutJsHeap(p: Profile): { profile: Profile; samples: number; bytes: number } {
  const str = (i: number | bigint) => p.stringTable.strings[Number(i)] ?? '';
  const isJs = (s: Profile['sample'][number]) => s.label.some((l) => str(l.key) === 'heap' && str(l.str) === 'js');
  const js = p.sample.filter(isJs);
  if (js.length === 0) return { profile: p, samples: 0, bytes: 0 };
  const inuse = p.sampleType.findIndex((t) => str(t.type) === 'inuse_space');
  const bytes = inuse < 0 ? 0 : js.reduce((a, s) => a + Number(s.value[inuse] ?? 0), 0);
  const profile = Object.assign(Object.create(Object.getPrototypeOf(p) as object) as Profile, p, { sample: p.sample.filter((s) => !isJs(s)) });
  return { profile, samples: js.length, bytes };
}

export const CONVERT_HELP = `Usage: mimalloc-pprof convert IN OUT

Converts a heap profile between gperftools heap_v2 text and profile.proto. IN's format is
detected (proto, gzipped or not, or heap text); OUT's extension picks the output:
  .pb.gz, .pb, .pprof  gzipped profile.proto
  .heap, .txt          heap_v2 text (addresses and mappings only: function names are
                       dropped; values are re-sampled to the profile's period;
                       JavaScript-heap samples, which have no addresses, are left out
                       and counted on stderr)

${SOURCE_HELP.replace('FILE may', 'IN may')}

Options:
  --token T   bearer token for a URL (default: MIMALLOC_PPROF_TOKEN)
  --timeout D how long to wait for a URL's answer (default 60s; 500ms, 10s, 2m)
  -h, --help  this help
`;

export function outputFormat(path: string): OutputFormat {
  const format = formatOfName(path);
  if (!format) throw new UsageError(`convert: cannot tell the output format from ${path} (use one of ${OUTPUT_FORMATS.map(([e]) => e).join(', ')})`);
  return format;
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
    const token = sourceArgs('convert', args.values);
    const profile = await readProfile(input, token);
    const { profile: kept, samples, bytes } = format === 'heap_v2' ? withoutJsHeap(profile) : { profile, samples: 0, bytes: 0 };
    writeFileAtomic(output, ENCODERS[format](kept, input));
    if (samples > 0) {
      io.err.write(
        `mimalloc-pprof: convert: left out ${samples} JavaScript-heap sample${samples === 1 ? '' : 's'} (${humanBytes(bytes)} in use): heap_v2 text holds native addresses only (keep the .pb.gz for them)\n`,
      );
    }
    return 0;
  },
};
