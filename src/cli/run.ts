/**
 * `mimalloc-pprof run [options] -- CMD ARGS…`: runs CMD on mimalloc with profiling from its
 * first allocation, and turns each process's raw profile into one symbolised, gzipped
 * profile.proto with JavaScript frames named.
 *
 * Every process of the run (children, grandchildren, Node or not) gets the preload and a
 * raw dump named by its pid in a private directory; Node processes also get V8's perf map
 * and an exit hook that dumps before Node's teardown frees its native memory. After CMD
 * ends, each raw profile is symbolised here, in this process, and written next to --out.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants as fsConstants, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { constants as osConstants } from 'node:os';

import { Profile } from 'pprof-format';

import { debuglog } from 'node:util';

import { UsageError } from '../errors.js';
import { preloadObstacle, which } from '../native/launch.js';
import { addonPath, libraryPath, packageRoot } from '../native/library.js';
import { isPreloadLibrary, symbolize } from '../symbolize/index.js';
import { isJavaScriptName } from '../symbolize/perfmap.js';
import { encodeHeapText, encodeProfile } from '../profile/index.js';
import { splitCommandLine, writeFileAtomic } from './args.js';
import { humanBytes, printTop } from './top.js';

const debug = debuglog('mimalloc-pprof');

export const RUN_HELP = `Usage: mimalloc-pprof run [options] -- CMD [ARGS…]

Runs CMD on mimalloc with heap profiling from its first allocation. At the end of each
process's life it writes one symbolised, gzipped profile.proto (children get their own
files, named by pid), prints the top in-use allocation sites and the file path, and exits
with CMD's own status.

Options:
  --out FILE          profile of the main process (default mimalloc-pprof.pb.gz); other
                      processes: FILE with .<pid> before the extension
  --format proto|text gzipped profile.proto (default) or gperftools heap_v2 text
  --interval BYTES    mean sampling interval, k/m/g suffixes (default 512k)
  --seed N            reproducible sampling
  --bt-max N          stack depth, 1-128 (default 64)
  --top N             rows of the printed table (default 10; 0: none)
  --no-gc             Node: skip the full garbage collection before the exit profile
                      (by default memory that only unreachable JavaScript objects hold,
                      such as dropped Buffers, is not reported as in use)
  --no-profile        only run CMD on mimalloc (no profiling)
  -h, --help          this help
`;

interface RunOptions {
  out: string;
  format: 'proto' | 'text';
  interval?: number;
  seed?: bigint;
  btMax: number;
  top: number;
  profile: boolean;
  gc: boolean;
  command: string[];
}

const VALUE_OPTIONS = new Set(['--out', '--format', '--interval', '--seed', '--bt-max', '--top']);

export function parseRunArgs(argv: string[]): RunOptions | 'help' {
  const opts: RunOptions = { out: 'mimalloc-pprof.pb.gz', format: 'proto', btMax: 64, top: 10, profile: true, gc: true, command: [] };
  const split = splitCommandLine('run', argv, new Set(['--no-profile', '--no-gc']), VALUE_OPTIONS);
  if (split === 'help') return 'help';
  for (const [name, value] of split.options) {
    if (value === true) {
      if (name === '--no-gc') opts.gc = false;
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
    }
  }
  opts.command = split.rest;
  if (opts.command.length === 0) throw new UsageError('run: no command given (mimalloc-pprof run [options] -- CMD ARGS…)');
  return opts;
}

function packageVersion(): string {
  return (JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string }).version;
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

function withPid(out: string, pid: number): string {
  const ext = out.endsWith('.pb.gz') ? '.pb.gz' : extname(out);
  return `${out.slice(0, out.length - ext.length)}.${pid}${ext}`;
}

/** --out must be writable before the program runs: found afterwards, the profile is lost. */
function checkOut(out: string): void {
  const dir = dirname(resolve(out));
  let isDir = false;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    throw new UsageError(`run: --out ${out}: the folder ${dir} does not exist`);
  }
  if (!isDir) throw new UsageError(`run: --out ${out}: ${dir} is not a folder`);
  try {
    accessSync(dir, fsConstants.W_OK);
  } catch {
    throw new UsageError(`run: --out ${out}: the folder ${dir} is not writable`);
  }
  if (existsSync(out) && statSync(out).isDirectory()) throw new UsageError(`run: --out ${out} is a folder`);
}

/**
 * LD_PRELOAD splits on spaces and colons and NODE_OPTIONS on spaces, with no way to quote in
 * the first: a file whose path holds one (an install under "My Projects") is reached through a
 * link of the same name in the run's folder. Node resolves the link for `require`, the loader
 * loads the target: the program sees the real file.
 */
function unsplittable(file: string, runDir: string): string {
  if (!/[\s:]/.test(file)) return file;
  const link = join(runDir, basename(file));
  if (/[\s:]/.test(link)) throw new Error(`the temporary folder ${runDir} holds a space or a colon: set TMPDIR to one without`);
  if (!existsSync(link)) symlinkSync(file, link);
  return link;
}

const EXIT_HOOK = join(packageRoot, 'dist', 'src', 'node', 'exit-hook.cjs');

/** The signals `run` passes on to its program (it ends when they end the program). */
const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;

/**
 * A detached shell that outlives a `run` killed by SIGKILL: it removes the run's folder and
 * the perf maps and V8 logs of its Node processes. (The program itself dies with `run`: the preload asks
 * for PR_SET_PDEATHSIG.) A run that ends normally removes them itself; the watchdog then
 * finds nothing and ends within a second.
 */
function startWatchdog(runDir: string): void {
  const script =
    'while kill -0 "$1" 2>/dev/null; do sleep 1; done; ' +
    'for f in "$2"/loaded.*; do [ -e "$f" ] || continue; p=${f##*.}; d=$(cat "$f"); rm -f "/tmp/perf-$p.map"; ' +
    '[ -n "$d" ] && rm -f -- "$d"/isolate-0x*-"$p"-v8.log; done; rm -rf "$2"';
  try {
    const w = spawn('/bin/sh', ['-c', script, 'mimalloc-pprof-watchdog', String(process.pid), runDir], {
      detached: true,
      stdio: 'ignore',
    });
    w.on('error', () => undefined);
    w.unref();
  } catch {
    /* no shell: only a killed run leaves its folder */
  }
}

export async function runCommand(argv: string[]): Promise<number> {
  const parsed = parseRunArgs(argv);
  if (parsed === 'help') {
    process.stdout.write(RUN_HELP);
    return 0;
  }
  const opts = parsed;
  if (opts.profile) checkOut(opts.out);
  const lib = libraryPath();
  const runDir = mkdtempSync(join(tmpdir(), 'mimalloc-pprof-run-'));
  startWatchdog(runDir);
  try {
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const k of Object.keys(env)) if (k.startsWith('MIMALLOC_PROF')) delete env[k];
    const preload = unsplittable(lib, runDir);
    env.LD_PRELOAD = env.LD_PRELOAD ? `${preload}:${env.LD_PRELOAD}` : preload;
    env.MIMALLOC_PPROF_RUN_DIR = runDir;
    env.MIMALLOC_PPROF_RUN_PID = String(process.pid);
    if (opts.profile) {
      env.MIMALLOC_PROF = '1';
      env.MIMALLOC_PROF_BT_MAX = String(opts.btMax);
      if (opts.interval !== undefined) env.MIMALLOC_PROF_SAMPLE_INTERVAL = String(opts.interval);
      if (opts.seed !== undefined) env.MIMALLOC_PROF_SEED = String(opts.seed);
      env.MIMALLOC_PROF_DUMP_AT_EXIT = join(runDir, 'raw.%p.pb');
      env.MIMALLOC_PROF_DUMP_FORMAT = 'proto';
      // Any process of the run may be Node (npx, shebang scripts, children): the options are
      // inert elsewhere. They name JIT and interpreted frames, and dump before teardown.
      env.MIMALLOC_PPROF_ADDON = addonPath();
      if (!opts.gc) env.MIMALLOC_PPROF_NO_GC = '1';
      const hook = unsplittable(EXIT_HOOK, runDir);
      env.NODE_OPTIONS = [env.NODE_OPTIONS, '--perf-basic-prof', '--interpreted-frames-native-stack', `--require=${hook}`]
        .filter(Boolean)
        .join(' ');
    }

    const [cmd, ...args] = opts.command as [string, ...string[]];
    const file = which(cmd, env);
    if (file === undefined) {
      process.stderr.write(`mimalloc-pprof: ${cmd}: command not found\n`);
      return 127;
    }
    try {
      accessSync(file, fsConstants.X_OK);
    } catch {
      process.stderr.write(`mimalloc-pprof: ${cmd}: permission denied (not executable)\n`);
      return 126; // as a shell says it
    }
    const obstacle = preloadObstacle(file);
    if (obstacle) process.stderr.write(`mimalloc-pprof: warning: ${obstacle}\n`);

    const child = spawn(file, args, { stdio: 'inherit', env, argv0: cmd });
    // Passed on, so that `kill -INT <run>` and a container's SIGTERM reach the program; a
    // Ctrl-C that reaches both is delivered to the program once (native/src/signals.c).
    const forwarders = FORWARDED.map((signal) => {
      const forward = () => {
        if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      };
      process.on(signal, forward);
      return [signal, forward] as const;
    });
    const ended = await new Promise<[number | null, NodeJS.Signals | null] | Error>((done) => {
      child.once('error', (e) => done(e));
      child.once('exit', (c, s) => done([c, s]));
    });
    for (const [signal, forward] of forwarders) process.removeListener(signal, forward);
    if (ended instanceof Error) {
      const code = (ended as NodeJS.ErrnoException).code;
      process.stderr.write(`mimalloc-pprof: ${cmd}: ${ended.message}\n`);
      return code === 'ENOENT' ? 127 : 126;
    }
    const [code, signal] = ended;
    const status = code ?? 128 + (osConstants.signals[signal ?? 'SIGTERM'] ?? 15);
    const mainPid = child.pid ?? -1;

    const pids = readdirSync(runDir)
      .map((f) => /^loaded\.(\d+)$/.exec(f)?.[1])
      .filter((p): p is string => p !== undefined);
    if (opts.profile) removeV8Logs(runDir, pids);
    const loaded = pids.includes(String(mainPid));
    if (!loaded) {
      process.stderr.write(
        `mimalloc-pprof: ERROR: the preload library did not take effect in ${cmd}` +
          (obstacle ? ` (${obstacle})` : ' (a static or setuid program, or a loader that ignored LD_PRELOAD)') +
          ': it did not run on mimalloc and nothing was profiled\n',
      );
      return status === 0 ? 3 : status;
    }
    if (!opts.profile) return status;

    const raws = readdirSync(runDir)
      .map((f) => /^raw\.(\d+)\.pb$/.exec(f))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => (a === mainPid ? -1 : b === mainPid ? 1 : a - b));
    if (raws.length === 0) {
      process.stderr.write(`mimalloc-pprof: no profile was written: ${whyNoProfile(cmd, code, signal)}\n`);
      return status;
    }
    for (const pid of raws) {
      const started = performance.now();
      const raw = Profile.decode(readFileSync(join(runDir, `raw.${pid}.pb`)));
      const perfMapPath = `/tmp/perf-${pid}.map`;
      const { profile } = symbolize(raw, {
        pid,
        perfMapPath: existsSync(perfMapPath) ? perfMapPath : undefined,
        trimFile: isPreloadLibrary,
      });
      profile.comment.push(
        profile.stringTable.dedup(
          `mimalloc-pprof ${packageVersion()} run: interval=${opts.interval ?? 524288} seed=${opts.seed ?? 'none'} pid=${pid}`,
        ),
      );
      const out = pid === mainPid ? opts.out : withPid(opts.out, pid);
      writeProfile(out, profile, opts.format);
      debug('postprocess pid=%d samples=%d ms=%s', pid, profile.sample.length, (performance.now() - started).toFixed(1));
      if (existsSync(perfMapPath) && env.NODE_OPTIONS) rmSync(perfMapPath, { force: true });
      if (pid === mainPid && opts.top > 0) {
        process.stderr.write(`\nmimalloc-pprof: in-use memory of ${basename(cmd)} (pid ${pid}) at exit\n`);
        printTop(profile, 'inuse_space', opts.top, process.stderr);
        printJavaScriptCallers(profile, opts.top, process.stderr);
      }
      process.stderr.write(`mimalloc-pprof: wrote ${resolve(out)}${pid === mainPid ? '' : ` (pid ${pid})`}\n`);
    }
    return status;
  } finally {
    rmSync(runDir, { recursive: true, force: true });
  }
}

/** The closing message when a run left no profile, naming the cause that fits the ending. */
function whyNoProfile(cmd: string, code: number | null, signal: NodeJS.Signals | null): string {
  if (signal === 'SIGKILL') return `${cmd} was killed by SIGKILL, which no program can catch`;
  if (signal !== null) {
    const core = ['SIGSEGV', 'SIGBUS', 'SIGABRT', 'SIGFPE', 'SIGILL', 'SIGTRAP', 'SIGSYS'].includes(signal);
    return `${cmd} was ended by ${signal}${core ? ' (a crash: its default action dumps core, where core dumps are on)' : ''}, which the profiler does not catch`;
  }
  return (
    `${cmd} exited with status ${code} without running its exit handlers (_exit, or a crash of its own handling), ` +
    'or it replaced itself (exec) with a program the preload cannot reach (static or setuid)'
  );
}

/**
 * The JavaScript functions under which native memory is in use (cumulative, each function
 * once per sample): the question a Node user came with, which a flat top by native leaf
 * cannot answer. JavaScript frames are the ones named from V8's perf map (system name JS:…).
 */
function printJavaScriptCallers(profile: Profile, n: number, out: { write(s: string): unknown }): void {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const types = profile.sampleType.map((t) => str(t.type));
  const inuse = types.indexOf('inuse_space');
  // the program's own code: Node's internals (node:…) are the same for every program, and the
  // exit hook's loading of the addon is the profiler's
  const jsFunctions = new Map(
    profile.function
      .filter((f) => isJavaScriptName(str(f.systemName)) && !str(f.filename).startsWith('node:') && str(f.filename) !== EXIT_HOOK)
      .map((f) => [Number(f.id), f]),
  );
  if (inuse < 0 || jsFunctions.size === 0) return;
  // one row per source function, whatever tiers (interpreted, baseline, optimised) it ran in
  const display = (f: (typeof profile.function)[number]) =>
    str(f.filename) ? `${str(f.name)} ${str(f.filename)}:${Number(f.startLine)}` : str(f.name);
  const locations = new Map(profile.location.map((l) => [Number(l.id), l]));
  const cum = new Map<string, number>();
  let total = 0;
  for (const s of profile.sample) {
    const v = Number(s.value[inuse] ?? 0);
    total += v;
    const seen = new Set<string>();
    for (const id of s.locationId)
      for (const line of locations.get(Number(id))?.line ?? []) {
        const f = jsFunctions.get(Number(line.functionId));
        const key = f && display(f);
        if (key !== undefined && !seen.has(key)) {
          seen.add(key);
          cum.set(key, (cum.get(key) ?? 0) + v);
        }
      }
  }
  const rows = [...cum].sort((a, b) => b[1] - a[1]).slice(0, n);
  if (rows.length === 0 || total <= 0) return;
  out.write('\nJavaScript functions with native memory in use beneath them (cumulative)\n');
  for (const [name, bytes] of rows) {
    out.write(`${humanBytes(bytes).padStart(9)} ${((100 * bytes) / total).toFixed(2).padStart(6)}%  ${name}\n`);
  }
}

/**
 * V8 11 (Node 20) writes an isolate-<address>-<pid>-v8.log into the working directory
 * whenever --perf-basic-prof is on, and its --logfile cannot be set through NODE_OPTIONS:
 * remove the logs of the run's own processes, which the user did not ask for, in each one's
 * working directory (its loaded.<pid> marker holds it), and the perf maps of those whose
 * profile was not read (a process killed before it could write one).
 */
function removeV8Logs(runDir: string, pids: readonly string[]): void {
  const wanted = new Set(pids);
  const dirs = new Set([process.cwd()]);
  for (const pid of pids) {
    try {
      const cwd = readFileSync(join(runDir, `loaded.${pid}`), 'utf8');
      if (cwd.startsWith('/')) dirs.add(cwd);
    } catch {
      /* no marker text: the run's own directory only */
    }
    if (!existsSync(join(runDir, `raw.${pid}.pb`))) rmSync(`/tmp/perf-${pid}.map`, { force: true });
  }
  for (const dir of dirs) {
    let names: string[] = [];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const f of names) {
      const pid = /^isolate-0x[0-9a-f]+-(\d+)-v8\.log$/.exec(f)?.[1];
      if (pid !== undefined && wanted.has(pid)) rmSync(join(dir, f), { force: true });
    }
  }
}

function writeProfile(out: string, profile: Profile, format: 'proto' | 'text'): void {
  writeFileAtomic(out, format === 'proto' ? encodeProfile(profile) : encodeHeapText(profile, out));
}
