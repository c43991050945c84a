/**
 * The CLI: argv → exit code. Commands are one table (COMMANDS, a Record over CommandName,
 * so a command without an entry does not compile); each parses its arguments, calls the
 * library and renders. Exit codes: 0 ok, 2 usage error or bad input (one line on stderr
 * naming the problem); an internal error prints one line (its stack with
 * NODE_DEBUG=mimalloc-pprof) and exits 1.
 */
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, readFileSync, readlinkSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { debuglog } from 'node:util';

import { MimallocPprofError, UsageError } from '../errors.js';
import { includePath, libraryPath, packageRoot, pkgConfigPath } from '../preload/library.js';
import type { Command, Io, Out } from './args.js';
import { compareCommandEntry } from './compare.js';
import { growthCommand } from './growth.js';
import { reportCommand } from './report.js';
import { convertCommand } from './convert.js';
import { diffCommand } from './diff.js';
import { runCommand } from './run.js';
import { symbolizeCommand } from './symbolize.js';
import { topCommand } from './top.js';

const debug = debuglog('mimalloc-pprof');

export type CommandName = 'lib' | 'include' | 'pkg-config-path' | 'run' | 'top' | 'diff' | 'convert' | 'report' | 'growth' | 'symbolize' | 'compare';

/** A command that prints one path and takes no arguments. */
function pathCommand(name: string, summary: string, help: string, path: () => string, check?: (p: string) => string | undefined): Command {
  return {
    summary,
    run(rest, io) {
      if (rest.includes('-h') || rest.includes('--help')) {
        io.out.write(help);
        return 0;
      }
      if (rest.length > 0) throw new UsageError(`${name} takes no arguments (got ${rest.join(' ')})`);
      const p = path();
      const warning = check?.(p);
      if (warning) io.err.write(`mimalloc-pprof: warning: ${warning}\n`);
      io.out.write(`${p}\n`);
      return 0;
    },
  };
}

const libCommand = pathCommand(
  'lib',
  'print the absolute path of the preload library, for\nLD_PRELOAD="$(npx mimalloc-pprof lib)" ./app',
  `Usage: mimalloc-pprof lib

Prints the absolute path of the preload library (libmimalloc-pprof.so). LD_PRELOAD splits
on spaces and colons, quoted or not: when the path holds one, lib prints a link to the
library from a folder of yours whose path holds neither (XDG_RUNTIME_DIR, else the temporary
folder, mimalloc-pprof-<uid>/), so that LD_PRELOAD="$(npx mimalloc-pprof lib)" works.
`,
  () => preloadablePath(libraryPath()),
  (p) => (/[\s:]/.test(p) ? 'this path holds a space or a colon, which LD_PRELOAD splits on: link it from a path without one (ln -s), or use mimalloc-pprof run' : undefined),
);

/**
 * The library as LD_PRELOAD can take it: its own path, or when that holds a space or a colon
 * (which ld.so splits LD_PRELOAD on, quoted or not), a link to it in a folder of this user's
 * alone whose path holds neither (XDG_RUNTIME_DIR, else the temporary folder). When no such
 * link can be made, the path itself (lib then warns).
 */
export function preloadablePath(lib: string, env: NodeJS.ProcessEnv = process.env): string {
  const splits = /[\s:]/;
  if (!splits.test(lib)) return lib;
  const uid = process.getuid?.() ?? 0;
  for (const base of [env.XDG_RUNTIME_DIR, tmpdir()]) {
    if (!base || !isAbsolute(base)) continue;
    const dir = join(base, `mimalloc-pprof-${uid}`);
    const link = join(dir, `libmimalloc-pprof-${createHash('sha256').update(lib).digest('hex').slice(0, 12)}.so`);
    if (splits.test(link)) continue;
    try {
      mkdirSync(dir, { mode: 0o700, recursive: true });
      const st = lstatSync(dir);
      // another user's folder (made first, to swap the link) is not used
      if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o077) !== 0) continue;
      let current: string | undefined;
      try {
        current = readlinkSync(link);
      } catch {
        current = undefined;
      }
      if (current !== lib) {
        rmSync(link, { force: true });
        symlinkSync(lib, link);
      }
      return link;
    } catch {
      continue;
    }
  }
  return lib;
}

const includeCommand = pathCommand(
  'include',
  'print the folder of the C headers, for\ncc app.c -I"$(npx mimalloc-pprof include)" …',
  `Usage: mimalloc-pprof include

Prints the absolute path of the folder that holds the C API's headers
(mimalloc-pprof/profile.h, mimalloc-pprof/memory-events.h, and mimalloc/memory-events.h,
the original system's path), for:
  cc app.c -I"$(npx mimalloc-pprof include)" -L"$(dirname "$(npx mimalloc-pprof lib)")" -lmimalloc-pprof
`,
  includePath,
);

const pkgConfigCommand = pathCommand(
  'pkg-config-path',
  'print the folder of mimalloc-pprof.pc, for\nPKG_CONFIG_PATH=$(npx mimalloc-pprof pkg-config-path) pkg-config …',
  `Usage: mimalloc-pprof pkg-config-path

Prints the absolute path of the folder that holds mimalloc-pprof.pc, for:
  export PKG_CONFIG_PATH="$(npx mimalloc-pprof pkg-config-path)"
  cc app.c $(pkg-config --cflags --libs mimalloc-pprof)
`,
  pkgConfigPath,
);

const COMMANDS: Record<CommandName, Command> = {
  lib: libCommand,
  include: includeCommand,
  'pkg-config-path': pkgConfigCommand,
  run: {
    summary: 'run a command on mimalloc with heap profiling (see run --help)',
    run: (argv) => runCommand(argv),
  },
  top: topCommand,
  diff: diffCommand,
  convert: convertCommand,
  report: reportCommand,
  growth: growthCommand,
  symbolize: symbolizeCommand,
  compare: compareCommandEntry,
};

function help(): string {
  const names = Object.keys(COMMANDS) as CommandName[];
  const list = names
    .map((n) => {
      const [first, ...more] = COMMANDS[n].summary.split('\n');
      return [`  ${n.padEnd(15)}  ${first}`, ...more.map((l) => `  ${''.padEnd(15)}  ${l}`)].join('\n');
    })
    .join('\n');
  return `Usage: mimalloc-pprof <command> [options]

Commands:
${list}

Options:
  -h, --help     show this help (also: <command> --help)
  -v, --version  print the version

Environment (read by the preload library):
  MIMALLOC_PROF=1                     start profiling at load
  MIMALLOC_PROF_DUMP_AT_EXIT=path     write a profile at exit (%p: pid)
  MIMALLOC_PROF_DUMP_FORMAT=text|proto
  MIMALLOC_PROF_SAMPLE_INTERVAL=bytes mean sampling interval (default 524288)
  MIMALLOC_PROF_SEED=n                reproducible sampling
  MIMALLOC_PROF_VERBOSE=1             one line at load: mimalloc version, state
`;
}

function version(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

function isCommand(name: string): name is CommandName {
  return Object.prototype.hasOwnProperty.call(COMMANDS, name);
}

/** One line: newlines in a message would break "one error line" for callers that parse it. */
function oneLine(s: string): string {
  return s.replace(/\s*[\r\n]+\s*/g, ' ').trim();
}

/** Runs the CLI; returns the exit code (0 ok, 2 usage or bad input, 1 internal error). */
export async function main(argv: string[], out: Out = process.stdout, err: Out = process.stderr): Promise<number> {
  const io: Io = { out, err };
  try {
    const [command, ...rest] = argv;
    if (command === undefined || command === '-h' || command === '--help' || command === 'help') {
      out.write(help());
      return command === undefined ? 2 : 0;
    }
    if (command === '-v' || command === '--version') {
      out.write(`${version()}\n`);
      return 0;
    }
    if (!isCommand(command)) throw new UsageError(`unknown command '${command}' (see mimalloc-pprof --help)`);
    return await COMMANDS[command].run(rest, io);
  } catch (e) {
    if (e instanceof MimallocPprofError) {
      err.write(`mimalloc-pprof: ${oneLine(e.message)}\n`);
      return 2;
    }
    debug('%s', e instanceof Error ? e.stack : String(e));
    err.write(`mimalloc-pprof: internal error: ${oneLine(e instanceof Error ? e.message : String(e))} (details with NODE_DEBUG=mimalloc-pprof)\n`);
    return 1;
  }
}
