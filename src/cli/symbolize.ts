/**
 * `mimalloc-pprof symbolize RAW [-o OUT]`: names a raw dump of the preload library (heap_v2
 * text or profile.proto, as MIMALLOC_PROF_DUMP_AT_EXIT or the C API wrote it) from the
 * binaries on this machine, and JavaScript frames from the process's V8 perf map while it is
 * still in /tmp, into one self-contained gzipped profile.proto.
 */
import { existsSync } from 'node:fs';

import { UsageError } from '../errors.js';
import { perfMapBeside } from '../run/index.js';
import { encodeProfile } from '../profile/proto.js';
import { hasUnnamedFrames, nameRawProfile } from '../symbolize/raw.js';
import { type Command, parseCommandArgs, readProfileFile, writeFileAtomic } from './args.js';

export const SYMBOLIZE_HELP = `Usage: mimalloc-pprof symbolize RAW [-o OUT] [--pid N]

Names the frames of a raw heap profile (heap_v2 text or profile.proto written by the preload
library by hand) from the binaries still on this machine, and its JavaScript frames from
/tmp/perf-<pid>.map when the Node process ran with --perf-basic-prof and the map is still
there (for X.<pid>.raw.pb, the raw profile an interrupted run kept, from X.<pid>.perf.map
beside it). Writes a gzipped profile.proto that needs no binaries (go tool pprof, top, diff).
top and diff name raw input the same way by themselves.

Options:
  -o, --out OUT  where to write (default: RAW with .pb.gz in place of its extension, or
                 RAW.named.pb.gz when RAW is already .pb.gz)
  --pid N        the process whose perf map names JavaScript frames (default: the pid the
                 dump records)
  -h, --help     this help
`;

/** The default output next to the input. */
export function namedPath(raw: string): string {
  if (raw.endsWith('.pb.gz')) return `${raw.slice(0, -'.pb.gz'.length)}.named.pb.gz`;
  const m = /\.(pb|heap|txt|pprof|prof)$/.exec(raw);
  return `${m ? raw.slice(0, raw.length - m[0].length) : raw}.pb.gz`;
}

export const symbolizeCommand: Command = {
  summary: 'name the frames of a raw dump (native and JavaScript) into a\nself-contained profile.proto',
  run(argv, io) {
    const args = parseCommandArgs('symbolize', argv, { out: { type: 'string', short: 'o' }, pid: { type: 'string' } }, { min: 1, max: 1, names: 'one RAW file' });
    if (!args) {
      io.out.write(SYMBOLIZE_HELP);
      return 0;
    }
    const raw = args.positionals[0]!;
    const pidArg = args.values.pid;
    if (pidArg !== undefined && (typeof pidArg !== 'string' || !/^[1-9]\d{0,9}$/.test(pidArg))) {
      throw new UsageError(`symbolize: --pid must be a process id, not ${String(pidArg)}`);
    }
    const out = typeof args.values.out === 'string' ? args.values.out : namedPath(raw);
    if (/\.(heap|txt)$/.test(out)) throw new UsageError('symbolize: heap_v2 text cannot carry names: write a .pb.gz');
    const profile = readProfileFile(raw);
    const wasRaw = hasUnnamedFrames(profile);
    // the perf map an interrupted run kept beside the raw profile, else V8's in /tmp
    const beside = perfMapBeside(raw);
    const perfMapFile = !pidArg && beside !== undefined && existsSync(beside) ? beside : undefined;
    const report = nameRawProfile(profile, { ...(pidArg ? { pid: Number(pidArg) } : {}), ...(perfMapFile ? { perfMapFile } : {}) });
    writeFileAtomic(out, encodeProfile(profile, { gzip: true }));
    const js = report.perfMap ? `, ${report.javascript} JavaScript from ${report.perfMap}` : ', no JavaScript (no perf map)';
    io.err.write(
      wasRaw
        ? `mimalloc-pprof: named ${report.native} native locations${js}${report.byFile > 0 ? `, ${report.byFile} by their file alone (no symbol)` : ''}; ${report.unnamed} left as addresses; wrote ${out}\n`
        : `mimalloc-pprof: ${raw} was already named; wrote ${out}\n`,
    );
    return 0;
  },
};
