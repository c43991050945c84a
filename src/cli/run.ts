/**
 * `mimalloc-pprof run [options] -- CMD ARGS…`: parses the options, runs the program through
 * the run pipeline (src/run), and prints what it found: one line per process when there are
 * several, the top in-use sites and JavaScript functions of the process that held the most in use,
 * and where each profile went. Exits with the program's own status.
 */
import { randomBytes } from 'node:crypto';

import { UsageError } from '../errors.js';
import { parseServeAddress } from '../http/serve-address.js';
import type { RunOptions } from '../run/index.js';
import { splitCommandLine } from './split.js';
import { formatOfName } from '../profile/extensions.js';

export const RUN_HELP = `Usage: mimalloc-pprof run [options] -- CMD [ARGS…]

Runs CMD on mimalloc with heap profiling from its first allocation. At the end of each
process's life it writes one symbolised, gzipped profile.proto (children get their own
files, named by pid), prints the top in-use allocation sites and the file path, and exits
with CMD's own status.

Node processes get V8's perf map and an exit hook (NODE_OPTIONS); \`deno run\` gets a preload
module and DENO_V8_FLAGS: JavaScript functions are named in both.

Options:
  --out FILE          profile of the main process (default mimalloc-pprof.pb.gz, with
                      --format text mimalloc-pprof.heap); other processes: FILE with .<pid>
                      before the extension; a .heap or .txt FILE is written as text
  --format proto|text gzipped profile.proto (default) or gperftools heap_v2 text (addresses
                      and mappings only: top, diff, symbolize and pprof name its native
                      frames from the binaries; JavaScript names need proto); a --out FILE
                      whose extension names the other format is refused
  --interval BYTES    mean sampling interval, k/m/g suffixes (default 512k)
                      (profiles carry in-use figures and allocated totals, alloc_space and
                      alloc_objects; MIMALLOC_PROF_MAX_BYTES caps the profiler's memory)
  --seed N            reproducible sampling
  --bt-max N          stack depth, 1-128 (default 64; MIMALLOC_PROF_BT_MAX without run: 32)
  --top N             rows of the printed table (default 10; 0: none)
  --no-gc             Node: skip the full garbage collection before the exit profile
                      (by default memory that only unreachable JavaScript objects hold,
                      such as dropped Buffers, is not reported as in use)
  --no-js-heap        Node: leave out the JavaScript heap (by default V8's sampling heap
                      profile is merged in, its samples labelled heap=js, the native ones
                      heap=native)
  --main-only         profile only the process run starts, or what it exec's (its children
                      run on mimalloc, unprofiled)
  --every DURATION    also write profiles while the program runs, every DURATION (500ms,
                      10s, 1m; at least 100ms): FILE with .<pid>.<n> before .pb.gz, named as
                      they come (mimalloc-pprof growth reads the series; a forked child
                      that does not exec has none)
  --peak              write each profile as it stood at the high-water mark of its estimated
                      in-use bytes (within 1/32 of it) instead of at exit: the in-use figures
                      of that moment, allocated totals of the whole run; the profile's
                      comments say how much and when. Node: the JavaScript heap and the
                      resident set, measured at exit, are left out of it
  --html              also write an offline HTML report of the profile that is detailed
                      (flame graph, tables; see mimalloc-pprof report) next to it, FILE
                      with .html for its extension
  --no-cmdline        leave the processes' command lines out of the profiles and the report
                      (an argument may be a password; files are written 0600 either way)
  --serve [HOST:]PORT serve /debug/pprof/heap, /allocs… from inside CMD (a Node program) on
                      HOST:PORT (default host 127.0.0.1; 0: any free port, said on stderr),
                      while it runs, for go tool pprof, top URL, growth; JavaScript names
                      on; every file V8 or the profiler wrote is removed when it stops
  --token T           with --serve: the endpoints require "Authorization: Bearer T" (default
                      MIMALLOC_PPROF_TOKEN); needed for clients that are not on loopback
  --max-in-use SIZE   a memory budget (k/m/g suffixes): the run fails, status 4 when CMD
                      itself succeeded, when the in-use memory at exit is over SIZE beyond
                      reasonable doubt (the estimate's one-sided 95 % lower bound above it);
                      the failure names the functions that hold the most, and the profile
                      and an HTML report are written as usual
  --max-peak SIZE     the same for the high-water mark of the in-use memory (implies --peak:
                      the profile written is the peak's); one budget per run
  --live              Node: a live table of CMD's memory by function while it runs (top
                      --watch on its endpoints: --serve on a free loopback port with a token
                      of its own); on a terminal CMD's output goes to FILE with .log for its
                      extension meanwhile; Ctrl-C goes to CMD, q closes the table
  --no-profile        only run CMD on mimalloc (no profiling)
  -h, --help          this help
`;

export interface CliRunOptions extends RunOptions {
  top: number;
  html?: boolean;
  /** --max-in-use / --max-peak: the budget and what it is of */
  budget?: { bytes: number; of: 'in-use' | 'peak' };
}

const VALUE_OPTIONS = new Set(['--out', '--format', '--interval', '--seed', '--bt-max', '--top', '--every', '--serve', '--token', '--max-in-use', '--max-peak']);

export function parseRunArgs(argv: string[]): CliRunOptions | 'help' {
  const opts: CliRunOptions = { out: 'mimalloc-pprof.pb.gz', format: 'proto', btMax: 64, top: 10, profile: true, gc: true, jsHeap: true, command: [] };
  const split = splitCommandLine('run', argv, new Set(['--no-profile', '--no-gc', '--no-js-heap', '--main-only', '--html', '--peak', '--no-cmdline', '--live']), VALUE_OPTIONS);
  if (split === 'help') return 'help';
  for (const [name, value] of split.options) {
    if (value === true) {
      if (name === '--no-gc') opts.gc = false;
      else if (name === '--no-js-heap') opts.jsHeap = false;
      else if (name === '--main-only') opts.mainOnly = true;
      else if (name === '--html') opts.html = true;
      else if (name === '--peak') opts.peak = true;
      else if (name === '--no-cmdline') opts.cmdline = false;
      else if (name === '--live') opts.live = {};
      else opts.profile = false; // --no-profile
      continue;
    }
    switch (name) {
      case '--out':
        opts.out = value;
        break;
      case '--format':
        if (value !== 'proto' && value !== 'text') throw new UsageError(`run: --format must be proto or text, not ${value}`);
        opts.format = value;
        break;
      case '--interval':
        opts.interval = parseSize(value, '--interval');
        if (opts.interval < 1) throw new UsageError('run: --interval must be at least 1');
        break;
      case '--seed':
        if (!/^\d+$/.test(value)) throw new UsageError(`run: --seed must be a non-negative integer, not ${value}`);
        opts.seed = BigInt(value);
        break;
      case '--bt-max':
        opts.btMax = integer(value, '--bt-max', 1, 128);
        break;
      case '--top':
        opts.top = integer(value, '--top', 0, 100000);
        break;
      case '--every':
        opts.every = parseDuration(value, '--every');
        break;
      case '--serve': {
        const address = parseServeAddress(value);
        if (typeof address === 'string') throw new UsageError(`run: ${address}`);
        opts.serve = value;
        break;
      }
      case '--token':
        if (value === '' || /\s/.test(value)) throw new UsageError('run: --token must be a non-empty word');
        opts.serveToken = value;
        break;
      case '--max-in-use':
      case '--max-peak': {
        const of = name === '--max-peak' ? 'peak' : 'in-use';
        if (opts.budget && opts.budget.of !== of) throw new UsageError('run: one budget per run: --max-in-use or --max-peak');
        opts.budget = { bytes: parseSize(value, name), of };
        if (of === 'peak') opts.peak = true;
        break;
      }
    }
  }
  // the format and the file's name agree: --out's extension picks the format, --format the
  // default name; a name of the other format is refused
  const given = new Set(split.options.map(([name]) => name));
  const named = given.has('--out') ? formatOfName(opts.out) : undefined;
  if (given.has('--format')) {
    const wanted = opts.format === 'text' ? 'heap_v2' : 'proto';
    if (named !== undefined && named !== wanted) {
      throw new UsageError(`run: --out ${opts.out} names ${named === 'proto' ? 'a profile.proto' : 'heap_v2 text'} (by its extension), not --format ${opts.format}`);
    }
    if (!given.has('--out') && opts.format === 'text') opts.out = 'mimalloc-pprof.heap';
  } else if (named === 'heap_v2') opts.format = 'text';
  if (opts.budget && !opts.profile) throw new UsageError('run: a memory budget needs the profiler (not --no-profile)');
  opts.command = split.rest;
  if (opts.serveToken !== undefined && opts.serve === undefined) throw new UsageError('run: --token goes with --serve');
  if (opts.serve !== undefined && opts.serveToken === undefined && process.env.MIMALLOC_PPROF_TOKEN) opts.serveToken = process.env.MIMALLOC_PPROF_TOKEN;
  if (opts.serve !== undefined && !opts.profile) throw new UsageError('run: --serve needs the profiler (not --no-profile)');
  if (opts.live) {
    if (!opts.profile) throw new UsageError('run: --live needs the profiler (not --no-profile)');
    if (opts.serve !== undefined) throw new UsageError('run: --live serves on a port of its own: leave out --serve');
    opts.serve = '127.0.0.1:0';
    opts.serveToken = randomBytes(18).toString('base64url');
    if (process.stdout.isTTY) opts.live.log = `${opts.out.replace(/\.(pb\.gz|pb|pprof|heap|txt)$/i, '')}.log`;
  }
  if (opts.command.length === 0) throw new UsageError('run: no command given (mimalloc-pprof run [options] -- CMD ARGS…)');
  return opts;
}

/** A duration like 500ms, 10s, 1.5s or 2m, in milliseconds (at least 100 ms). */
export function parseDuration(value: string, name: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(value);
  const ms = m ? Number(m[1]) * (m[2] === 'ms' ? 1 : m[2] === 's' ? 1000 : 60_000) : NaN;
  if (!(ms >= 100 && ms <= 24 * 3600_000)) throw new UsageError(`run: ${name} must be a duration from 100ms to 24h like 500ms, 10s or 1m, not ${value}`);
  return Math.round(ms);
}

/** Bytes with an optional k/m/g suffix (powers of 1024), as the preload library reads them. */
export function parseSize(value: string, name: string): number {
  const m = /^(\d+)([kmg])?(?:i?b)?$/i.exec(value);
  if (!m) throw new UsageError(`run: ${name} must be a byte count like 65536 or 512k, not ${value}`);
  const shift = { k: 10, m: 20, g: 30 }[(m[2] ?? '').toLowerCase() as 'k' | 'm' | 'g'] ?? 0;
  const n = Number(m[1]) * 2 ** shift;
  if (!Number.isSafeInteger(n)) throw new UsageError(`run: ${name} is too large: ${value}`);
  return n;
}

function integer(value: string, name: string, min: number, max: number): number {
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
    throw new UsageError(`run: ${name} must be an integer from ${min} to ${max}, not ${value}`);
  }
  return Number(value);
}

export async function runCommand(argv: string[]): Promise<number> {
  const parsed = parseRunArgs(argv);
  if (parsed === 'help') {
    process.stdout.write(RUN_HELP);
    return 0;
  }
  const opts = parsed;
  const { runProgram } = await import('../run/index.js');
  // the program starts within runProgram's first step; what prints its results loads meanwhile
  const running = runProgram(opts);
  const view = import('./run-view.js');
  const result = await running;
  return (await view).printRun(opts, result);
}
