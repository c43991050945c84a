import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { MimallocPprofError, UsageError } from '../errors.js';
import { libraryPath, packageRoot } from '../native/library.js';

const HELP = `Usage: mimalloc-pprof <command> [options]

Commands:
  lib        print the absolute path of the preload library, for
             LD_PRELOAD=$(npx mimalloc-pprof lib) ./app

Options:
  -h, --help     show this help
  -v, --version  print the version

Environment (read by the preload library):
  MIMALLOC_PROF=1                     start profiling at load
  MIMALLOC_PROF_DUMP_AT_EXIT=path     write a profile at exit (%p: pid)
  MIMALLOC_PROF_DUMP_FORMAT=text|proto
  MIMALLOC_PROF_SAMPLE_INTERVAL=bytes mean sampling interval (default 524288)
  MIMALLOC_PROF_SEED=n                reproducible sampling
  MIMALLOC_PROF_VERBOSE=1             one line at load: mimalloc version, state
`;

const LIB_HELP = `Usage: mimalloc-pprof lib

Prints the absolute path of the preload library (libmimalloc-pprof.so).
`;

function version(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

/** Runs the CLI; returns the exit code (0 ok, 2 usage or bad input). */
export function main(argv: string[], out = process.stdout, err = process.stderr): number {
  try {
    const [command, ...rest] = argv;
    if (command === undefined || command === '-h' || command === '--help' || command === 'help') {
      out.write(HELP);
      return command === undefined ? 2 : 0;
    }
    if (command === '-v' || command === '--version') {
      out.write(`${version()}\n`);
      return 0;
    }
    if (command === 'lib') {
      if (rest.includes('-h') || rest.includes('--help')) {
        out.write(LIB_HELP);
        return 0;
      }
      if (rest.length > 0) throw new UsageError(`lib takes no arguments (got ${rest.join(' ')})`);
      out.write(`${libraryPath()}\n`);
      return 0;
    }
    throw new UsageError(`unknown command '${command}' (see mimalloc-pprof --help)`);
  } catch (e) {
    if (e instanceof MimallocPprofError) {
      err.write(`mimalloc-pprof: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
}
