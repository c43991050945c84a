/**
 * Runs a program on mimalloc with heap profiling from its first allocation, and turns each
 * process's raw profile into one symbolised profile.
 *
 * Every process of the run (children, grandchildren, Node or not) gets the preload and a raw
 * dump named by its pid in a private folder; Node processes also get V8's perf map and an exit
 * hook that dumps before Node's teardown frees its native memory. The program sees nothing
 * else: signals end it as they would without the run (the preload writes the profile
 * natively, native/src/signals.c), the run passes on the signals it receives, and a run that
 * is killed takes its program and files with it. After the program ends, each raw profile is
 * symbolised here, in this process, and written next to `out`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, chmodSync, closeSync, copyFileSync, constants as fsConstants, existsSync, lstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { constants as osConstants, tmpdir } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { debuglog } from 'node:util';

import type { Profile } from '../profile/pprof.js';
import type { PeakInfo } from '../profile/peak.js';
import type { RssBreakdown } from '../profile/rss.js';
import { cacheFolder } from '../cache-folder.js';
import { UsageError } from '../errors.js';
import { denoExecutable, isNodeProgram, preloadObstacle, which } from '../preload/launch.js';
import { ADDON_FILE, addonPath, libraryPath, packageRoot } from '../preload/library.js';
import { perfMapOf, readMarkers, removeV8Leftovers, startWatchdog, unsplittable, type ProcessMarker } from './leftovers.js';

const debug = debuglog('mimalloc-pprof');

export interface RunOptions {
  /** The program and its arguments. */
  command: string[];
  /** Profile of the main process; other processes: `out` with .<pid> before the extension. */
  out: string;
  format: 'proto' | 'text';
  /** Mean sampling interval in bytes (the library's default, 512 KiB, when undefined). */
  interval?: number;
  seed?: bigint;
  /** Stack depth, 1-128. */
  btMax: number;
  /** false: only run the program on mimalloc. */
  profile: boolean;
  /** Node: a full garbage collection before the exit profile (default true). */
  gc: boolean;
  /** Node: V8's sampling heap profile merged in as heap=js samples (default true). */
  jsHeap: boolean;
  /** Profile only the process `run` starts: its children do not get the preload. */
  mainOnly?: boolean;
  /** Write each process's profile as it stood at the high-water mark of its estimated
   * in-use bytes (mi_prof_dump_peak) instead of at exit. */
  peak?: boolean;
  /** Milliseconds between periodic profiles (MIMALLOC_PROF_DUMP_EVERY): each process's series
   * is written, named, while it runs, as `out` with .<pid>.<n> before .pb.gz. */
  every?: number;
  /** false: the command lines of the run's processes are left out of the profiles (and so of
   * the report): an argument may be a password (default true). */
  cmdline?: boolean;
  /** `[HOST:]PORT`: the /debug/pprof/* endpoints in the Node process run starts. */
  serve?: string;
  /** The bearer token the endpoints of `serve` require. */
  serveToken?: string;
  /** `run --live`: a live table of the program's memory (src/cli/watch.ts) while it runs, read
   * from its endpoints (`serve` on a free loopback port with a token of the run's own). On a
   * terminal the program's output goes to `liveLog` meanwhile. */
  live?: { log?: string };
}

/** One process of the run. */
export interface ProcessReport extends ProcessMarker {
  /** The process `run` started. */
  main: boolean;
  /** Where its profile was written, when it wrote one. */
  file?: string;
  profile?: Profile;
  /** Estimated bytes in use when its profile was taken. */
  inuseBytes?: number;
  /** Its peak resident set (VmHWM) when its profile was taken. */
  peakRssBytes?: number;
  /** Node: its resident set accounted for when its profile was taken. */
  rss?: RssBreakdown;
  /** `--peak`: the profile is the peak's (its estimate, standard error and when). */
  peak?: PeakInfo;
  /** Node: the full garbage collection before the exit profile, the estimated native bytes
   * in use and V8's heap used before and after it. */
  gc?: { nativeBefore: number; nativeAfter: number; jsBefore: number; jsAfter: number };
}

export type RunResult =
  /** The program could not be started: 127 not found, 126 not executable (as a shell says). */
  | { kind: 'not-started'; status: 126 | 127; message: string }
  /** It ran, but the preload did not take effect in it (static or setuid, or ignored). */
  | { kind: 'not-preloaded'; status: number; message: string }
  | {
      kind: 'ended';
      /** The program's status, 128+N for signal N. */
      status: number;
      code: number | null;
      signal: NodeJS.Signals | null;
      /** Every process the preload reached, the main one first. */
      processes: ProcessReport[];
      /** When the program was started (Unix ms). */
      startedUnixMs?: number;
      /** Why the main process left no profile, when it left none (others may have). */
      noProfile?: string;
      /** A warning to show before the results (e.g. the preload cannot reach the program). */
      warning?: string;
      /** --every: the periodic profiles written, in order of pid and number. */
      series?: { pid: number; n: number; file: string }[];
      /** A SIGINT or SIGTERM to run while it named the profiles: the raw profiles not yet
       * named, kept beside `out` (mimalloc-pprof symbolize names them). */
      interrupted?: { signal: NodeJS.Signals; raw: { pid: number; file: string; perfMap?: string }[]; written: { pid: number; file: string }[] };
      /** npx/npm exec NAME: the package binary run started in its place. */
      followed?: { from: string; to: string };
    };

/** npx's and `npm exec`'s options that do not change which program they start. */
const LAUNCHER_FLAGS = new Set(['--yes', '-y', '--no-install', '--no', '--quiet', '-q', '--silent', '-s']);

/**
 * `npx NAME ARGS…` or `npm exec [--] NAME ARGS…` where NAME is a package binary installed in
 * `cwd` or a folder above (node_modules/.bin/NAME): that binary and its arguments, so that run
 * starts, and details, the program rather than npm (which would spawn it as a grandchild,
 * with the preload but without run's own arrangements for it, e.g. Deno's exit hook).
 * Undefined when npm would do more than that (fetch a package, --package, --call): run then
 * starts npm, and the process detailed is the heaviest one that is not npm or a shell.
 */
export function followLauncher(command: readonly string[], cwd: string): { command: string[]; binDir: string } | undefined {
  const [cmd, ...rest] = command;
  if (cmd === undefined) return undefined;
  const name = basename(cmd);
  let i = 0;
  if (name === 'npm') {
    if (rest[0] !== 'exec' && rest[0] !== 'x') return undefined;
    i = 1;
  } else if (name !== 'npx') return undefined;
  for (; i < rest.length; i++) {
    const a = rest[i]!;
    if (a === '--') {
      i++;
      break;
    }
    if (!a.startsWith('-')) break;
    if (!LAUNCHER_FLAGS.has(a)) return undefined;
  }
  const program = rest[i];
  if (program === undefined || program.includes('/') || program.includes('@')) return undefined;
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    const bin = join(dir, 'node_modules', '.bin', program);
    try {
      accessSync(bin, fsConstants.X_OK);
      if (statSync(bin).isFile()) return { command: [bin, ...rest.slice(i + 1)], binDir: join(dir, 'node_modules', '.bin') };
    } catch {
      // not here
    }
    if (dirname(dir) === dir) return undefined;
  }
}

/** A process that only starts another (npm, npx, a shell, env): not the one to detail. */
export function isLauncher(argv: readonly string[]): boolean {
  const exe = basename(argv[0] ?? '');
  if (['npm', 'npx', 'sh', 'bash', 'dash', 'env', 'corepack', 'yarn', 'pnpm'].includes(exe)) return true;
  const script = argv[1] ?? '';
  if (!/^node(js)?\d*$/.test(exe)) return false;
  // node running npm's entry: /usr/bin/npm, …/npm/bin/npx-cli.js, …/npm/lib/cli.js, yarn's, pnpm's
  return (
    /^(npm|npx|yarn|pnpm|corepack)(\.c?js)?$/.test(basename(script)) ||
    /\/(npm|yarn|pnpm|corepack)\/(bin|lib|dist)\/[^/]*\.c?js$/.test(script)
  );
}

/** `out` must be writable before the program runs: found afterwards, the profile is lost. */
export function checkOut(out: string): void {
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

/** What run tells its processes (a run inside a run starts afresh); the user's own
 * MIMALLOC_PPROF_* settings (the Node API's) pass through. */
const RUN_VARIABLES = ['RUN_DIR', 'RUN_PID', 'MAIN_ONLY', 'NODE_OPTIONS', 'NO_GC', 'ADDON', 'JS_HEAP', 'PEAK', 'SERVE', 'SERVE_TOKEN'].map((v) => `MIMALLOC_PPROF_${v}`);

/** The signals `run` passes on to its program (it ends when they end the program). */
const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;

/** The exit hook every Node process of a run loads (its own allocations are the profiler's). */
export const EXIT_HOOK = join(packageRoot, 'dist', 'src', 'node', 'exit-hook.cjs');

export function packageVersion(): string {
  return (JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string }).version;
}

/** `out` with `.<pid>` before its extension (`.pb.gz` counts as one). */
export function withPid(out: string, pid: number): string {
  const ext = out.endsWith('.pb.gz') ? '.pb.gz' : extname(out);
  return `${out.slice(0, out.length - ext.length)}.${pid}${ext}`;
}

/**
 * The environment of the program: the preload, its settings, and Node's flags and hook. With
 * `mainOnly` the preload stays inert in every process but the one run starts (or what it
 * exec's: native/src/lifecycle.c), the exit hook restores NODE_OPTIONS in a Node main process,
 * and a program that is not Node gets no Node options at all.
 */
function programEnv(opts: RunOptions, runDir: string, isNode: boolean): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  // the profiler's memory cap is the user's to set; run sets every other MIMALLOC_PROF* itself
  const maxBytes = env.MIMALLOC_PROF_MAX_BYTES;
  for (const k of Object.keys(env)) if (k.startsWith('MIMALLOC_PROF') || RUN_VARIABLES.includes(k)) delete env[k];
  const preload = unsplittable(libraryPath(), runDir);
  if (opts.mainOnly) {
    env.MIMALLOC_PPROF_MAIN_ONLY = '1';
    env.MIMALLOC_PPROF_NODE_OPTIONS = env.NODE_OPTIONS ?? '';
  }
  env.LD_PRELOAD = env.LD_PRELOAD ? `${preload}:${env.LD_PRELOAD}` : preload;
  env.MIMALLOC_PPROF_RUN_DIR = runDir;
  env.MIMALLOC_PPROF_RUN_PID = String(process.pid);
  if (opts.profile) {
    env.MIMALLOC_PROF = '1';
    env.MIMALLOC_PROF_BT_MAX = String(opts.btMax);
    if (opts.interval !== undefined) env.MIMALLOC_PROF_SAMPLE_INTERVAL = String(opts.interval);
    if (opts.seed !== undefined) env.MIMALLOC_PROF_SEED = String(opts.seed);
    // allocated totals (alloc_space, alloc_objects) beside in use: a program that frees its
    // memory before it exits still shows where it went; the cap bounds what they cost
    env.MIMALLOC_PROF_ACCUM = '1';
    if (maxBytes !== undefined) env.MIMALLOC_PROF_MAX_BYTES = maxBytes;
    env.MIMALLOC_PROF_DUMP_AT_EXIT = join(runDir, 'raw.%p.pb');
    if (opts.every !== undefined) {
      env.MIMALLOC_PROF_DUMP_EVERY = String(Math.round(opts.every));
      env.MIMALLOC_PROF_DUMP_EVERY_PATH = join(runDir, 'every.%p.%n.pb');
    }
    if (opts.peak) {
      env.MIMALLOC_PROF_DUMP_PEAK_AT_EXIT = join(runDir, 'peak.%p.pb');
      env.MIMALLOC_PPROF_PEAK = '1'; // Node's exit hook dumps it beside its own exit dump
    }
    env.MIMALLOC_PROF_DUMP_FORMAT = 'proto';
    // each sample carries how far V8's perf map had been written when its stack was taken
    // (V8 reuses freed code's addresses: native/src/jitmap.c, src/symbolize/perfmap.ts)
    env.MIMALLOC_PROF_PERF_MAP = '1';
    // the unwind rules met in this run, for the next one (native/src/rulefile.c): a process
    // restarted under run pays for the stacks' first sightings once per binary, not each time
    // (MIMALLOC_PPROF_CACHE_DIR says where, or off)
    const unwindCache = unwindCacheFolder();
    if (unwindCache !== undefined) env.MIMALLOC_PROF_UNWIND_CACHE = unwindCache;
    // Any process of the run may be Node (npx, shebang scripts, children): the options are
    // inert elsewhere. They name JIT and interpreted frames, and dump before teardown.
    // the addon built with the preloaded library (MIMALLOC_PPROF_LIB may name another
    // architecture's build, e.g. build/linux-arm64 for an arm64 Node under emulation)
    const beside = join(dirname(libraryPath()), ADDON_FILE);
    env.MIMALLOC_PPROF_ADDON = existsSync(beside) ? beside : addonPath();
    if (!opts.gc) env.MIMALLOC_PPROF_NO_GC = '1';
    if (!opts.jsHeap) env.MIMALLOC_PPROF_JS_HEAP = '0';
    if (opts.serve !== undefined) env.MIMALLOC_PPROF_SERVE = opts.serve;
    if (opts.serveToken !== undefined) env.MIMALLOC_PPROF_SERVE_TOKEN = opts.serveToken;
    if (opts.live) env.MIMALLOC_PPROF_LIVE = '1';
    if (opts.mainOnly && !isNode) return env;
    const hook = unsplittable(EXIT_HOOK, runDir);
    env.NODE_OPTIONS = [env.NODE_OPTIONS, '--perf-basic-prof', '--interpreted-frames-native-stack', `--require=${hook}`]
      .filter(Boolean)
      .join(' ');
  }
  return env;
}

/** The unwind rules' folder in the package's cache folder, made (0700) if missing; undefined
 * without a cache folder (MIMALLOC_PPROF_CACHE_DIR=off) or when it cannot be made. */
function unwindCacheFolder(): string | undefined {
  const base = cacheFolder();
  if (base === undefined) return undefined;
  const dir = resolve(base, 'unwind'); // absolute: the library refuses a relative one (a chdir would move it)
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return dir;
  } catch {
    return undefined;
  }
}

/**
 * Deno frees its memory before the preload's exit dump, as Node does, and has no
 * NODE_OPTIONS: `deno run` gets a --preload module that dumps on the `unload` event through
 * the preload's C API (FFI, allowed for that one library only), and V8's perf map through
 * DENO_V8_FLAGS. The module is written into the run's folder with its paths in it, so that it
 * needs no other permission. Other Deno subcommands run unprofiled by JavaScript (native
 * frames and the exit dump only).
 */
function denoArgs(args: string[], runDir: string, lib: string, env: NodeJS.ProcessEnv): string[] {
  const flags = '--perf-basic-prof,--interpreted-frames-native-stack';
  env.DENO_V8_FLAGS = env.DENO_V8_FLAGS ? `${env.DENO_V8_FLAGS},${flags}` : flags;
  const at = args.indexOf('run');
  if (at < 0 || args.slice(0, at).some((a) => !a.startsWith('-'))) return args;
  const hook = join(runDir, 'deno-hook.js');
  writeFileSync(
    hook,
    [
      '// mimalloc-pprof run: the profile before Deno tears down (src/run/index.ts, denoArgs)',
      `const lib = Deno.dlopen(${JSON.stringify(lib)}, {`,
      "  mi_prof_dump_proto: { parameters: ['buffer'], result: 'bool' },",
      "  mi_prof_stop: { parameters: [], result: 'void' },",
      '});',
      `const out = new TextEncoder().encode(${JSON.stringify(`${runDir}/raw.`)} + Deno.pid + '.pb\\0');`,
      "globalThis.addEventListener('unload', () => {",
      '  lib.symbols.mi_prof_dump_proto(out);',
      '  lib.symbols.mi_prof_stop();',
      '});',
      '',
    ].join('\n'),
  );
  return [...args.slice(0, at + 1), `--preload=${hook}`, `--allow-ffi=${lib}`, ...args.slice(at + 1)];
}

/** Starts the program, passes signals on to it, and resolves when it ends. */
async function launch(file: string, args: string[], argv0: string, env: NodeJS.ProcessEnv, log?: number) {
  // Passed on, so that `kill -INT <run>` and a container's SIGTERM reach the program; a
  // Ctrl-C that reaches both is delivered to the program once (native/src/signals.c). The
  // listeners come first: a fast program can be running, and signalled, before spawn returns.
  let child: ChildProcess | undefined;
  const pending: NodeJS.Signals[] = [];
  const forwarders = FORWARDED.map((signal) => {
    const forward = () => {
      if (child === undefined) pending.push(signal);
      else if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    };
    process.on(signal, forward);
    return [signal, forward] as const;
  });
  child = spawn(file, args, { stdio: log === undefined ? 'inherit' : ['inherit', log, log], env, argv0 });
  for (const signal of pending) child.kill(signal);
  const ended = await new Promise<{ code: number | null; signal: NodeJS.Signals | null } | Error>((done) => {
    child.once('error', (e) => done(e));
    child.once('exit', (code, signal) => done({ code, signal }));
  });
  for (const [signal, forward] of forwarders) process.removeListener(signal, forward);
  return { pid: child.pid ?? -1, ended };
}

class Interrupted extends Error {}

/** Moves V8's perf map of `pid` beside its kept raw profile (0600), so that nothing is left
 * in /tmp and `symbolize` still names its JavaScript frames; nothing when it has none. */
function keepPerfMap(pid: number, raw: string): { perfMap?: string } {
  const to = perfMapBeside(raw);
  if (to === undefined) return {};
  try {
    // /tmp is everyone's: only a regular file of this user, not followed through a link (as
    // the preload opens it, native/src/jitmap.c)
    const st = lstatSync(perfMapOf(pid));
    if (!st.isFile() || (process.getuid !== undefined && st.uid !== process.getuid())) return {};
    copyFileSync(perfMapOf(pid), to);
    chmodSync(to, 0o600);
    return { perfMap: to };
  } catch {
    return {}; // not writable: the raw profile is named without JavaScript names
  }
}

/** Where an interrupted run keeps the raw profile of `pid`: `out` with .<pid>.raw.pb. */
export function rawPath(out: string, pid: number): string {
  return `${out.replace(/\.(pb\.gz|pb|pprof|heap|txt)$/i, '')}.${pid}.raw.pb`;
}

/** Where an interrupted run keeps the perf map that names the JavaScript frames of a raw
 * profile kept at `raw` (rawPath): beside it, `.perf.map` for `.raw.pb`, where `symbolize`
 * looks for it. */
export function perfMapBeside(raw: string): string | undefined {
  return raw.endsWith('.raw.pb') ? `${raw.slice(0, -'.raw.pb'.length)}.perf.map` : undefined;
}

/** The closing message when a run left no profile, naming the cause that fits the ending. */
export function whyNoProfile(cmd: string, code: number | null, signal: NodeJS.Signals | null): string {
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
 * `run --live`: waits for the program's endpoints (the URL its serve writes into the run's
 * folder), then shows the live table (src/cli/watch.ts) on stdout until the program ends or
 * `q`. A Ctrl-C in the table goes to the program as SIGINT, as it would without the table.
 */
async function startLive(runDir: string, token: string | undefined, log: string | undefined, running: Promise<{ pid: number }>): Promise<void> {
  const controller = new AbortController();
  let ended = false;
  void running.then(() => {
    ended = true;
    controller.abort();
  });
  let url: string | undefined;
  while (!ended && url === undefined) {
    const found = readdirSync(runDir).find((f) => /^serve\.\d+\.json$/.test(f));
    if (found) {
      try {
        url = (JSON.parse(readFileSync(join(runDir, found), 'utf8')) as { url: string }).url;
      } catch {
        url = undefined; // written a moment from now
      }
    }
    if (url === undefined) await new Promise((r) => setTimeout(r, 100));
  }
  if (url === undefined) return;
  const { watch } = await import('../cli/watch.js');
  await watch({
    url: `${url}heap`,
    read: token ? { token, timeoutMs: 10_000 } : { timeoutMs: 10_000 },
    everyMs: 1000,
    windowMs: 5 * 60_000,
    rows: 20,
    out: process.stdout,
    input: process.stdin,
    signal: controller.signal,
    interrupt: () => void process.emit('SIGINT' as never),
    ...(log ? { banner: `the program's output goes to ${log} while this table is shown` } : {}),
  });
}

/** `out` with .<pid>.<n> before its extension, as gzipped proto: one profile of a series. */
export function seriesPath(out: string, pid: number, n: number): string {
  return `${out.replace(/\.(pb\.gz|pb|pprof|heap|txt)$/i, '')}.${pid}.${n}.pb.gz`;
}

/**
 * Runs `opts.command` as described in the file comment. Throws UsageError for an `out` that
 * cannot be written (before the program starts).
 */
export async function runProgram(opts: RunOptions): Promise<RunResult> {
  if (opts.profile) checkOut(opts.out);
  const followed = opts.profile ? followLauncher(opts.command, process.cwd()) : undefined;
  const [cmd, ...args] = (followed?.command ?? opts.command) as [string, ...string[]];
  const runDir = mkdtempSync(join(tmpdir(), 'mimalloc-pprof-run-'));
  startWatchdog(runDir);
  try {
    const found = which(cmd, process.env);
    const nodeProgram = found !== undefined && isNodeProgram(found);
    const env = programEnv(opts, runDir, nodeProgram);
    // as npx would: the package binaries on PATH for what the program starts
    if (followed) env.PATH = [followed.binDir, env.PATH].filter(Boolean).join(':');
    const file = which(cmd, env);
    if (file === undefined) return { kind: 'not-started', status: 127, message: `${cmd}: command not found` };
    try {
      accessSync(file, fsConstants.X_OK);
    } catch {
      return { kind: 'not-started', status: 126, message: `${cmd}: permission denied (not executable)` };
    }
    const obstacle = preloadObstacle(file);
    const deno = opts.profile ? denoExecutable(file) : undefined;
    const launched = deno ?? file;
    const launchArgs = deno ? denoArgs(args, runDir, unsplittable(libraryPath(), runDir), env) : args;

    const startedUnixMs = Date.now();
    debug('spawn at %s ms after run started', performance.now().toFixed(0));
    // spawned before the first await; the naming code loads while the program runs
    const logFd = opts.live?.log !== undefined ? openSync(opts.live.log, 'w', 0o600) : undefined;
    const running = launch(launched, launchArgs, deno ? 'deno' : cmd, env, logFd);
    if (logFd !== undefined) closeSync(logFd);
    if (opts.live && !nodeProgram) process.stderr.write(`mimalloc-pprof: --live shows Node programs' endpoints; ${cmd} is not one: its profile is written at its end\n`);
    const live = opts.live && nodeProgram ? startLive(runDir, opts.serveToken, opts.live.log, running) : undefined;
    const post = await import('./post.js');
    const copies = post.watchCodeCopies(runDir, opts.profile);
    const codeLogs = post.followCodeLogs(runDir, opts.profile);
    const series = opts.profile && opts.every !== undefined ? post.startSeries(opts, runDir, copies, codeLogs) : undefined;
    const { pid: mainPid, ended } = await running;
    await live;
    copies.stop();
    codeLogs.stop();
    const written = series?.stop() ?? [];
    if (ended instanceof Error) {
      const code = (ended as NodeJS.ErrnoException).code;
      return { kind: 'not-started', status: code === 'ENOENT' ? 127 : 126, message: `${cmd}: ${ended.message}` };
    }
    debug('program ended at %s ms', performance.now().toFixed(0));
    const { code, signal } = ended;
    const status = code ?? 128 + (osConstants.signals[signal ?? 'SIGTERM'] ?? 15);

    const markers = readMarkers(runDir);
    if (opts.profile) {
      post.keepV8Logs(runDir, markers, process.cwd());
      removeV8Leftovers(runDir, markers, process.cwd());
    }
    if (!markers.some((m) => m.pid === mainPid)) {
      return {
        kind: 'not-preloaded',
        status: status === 0 ? 3 : status,
        message:
          `the preload library did not take effect in ${cmd}` +
          (obstacle ? ` (${obstacle})` : ' (a static or setuid program, or a loader that ignored LD_PRELOAD)') +
          ': it did not run on mimalloc and nothing was profiled',
      };
    }
    // every process with a marker, and any with a raw profile but none (belt and braces: a
    // forked child writes its marker in fork's child handler)
    const raws = new Set(readdirSync(runDir).flatMap((f) => /^raw\.(\d+)\.pb$/.exec(f)?.[1] ?? []).map(Number));
    const known = new Set(markers.map((m) => m.pid));
    const all: ProcessMarker[] = [...markers, ...[...raws].filter((pid) => !known.has(pid)).map((pid) => ({ pid, cwd: '', ppid: 0, argv: [] }))];
    const processes: ProcessReport[] = all
      .map((m) => ({ ...m, main: m.pid === mainPid }))
      .sort((a, b) => (a.main ? -1 : b.main ? 1 : a.pid - b.pid));
    const result: RunResult = {
      kind: 'ended',
      status,
      code,
      signal,
      processes,
      startedUnixMs,
      ...(obstacle ? { warning: obstacle } : {}),
      ...(series ? { series: written } : {}),
      ...(followed ? { followed: { from: opts.command.slice(0, opts.command.length - followed.command.length + 1).join(' '), to: followed.command[0]! } } : {}),
    };
    if (!opts.profile) return result;
    // Naming takes a while for a big program: a line says so after a second, and a SIGINT or
    // SIGTERM then keeps the raw profiles not yet named beside `out` rather than losing them.
    let interrupted: NodeJS.Signals | undefined;
    const onSignal = (sig: NodeJS.Signals) => {
      interrupted ??= sig;
    };
    const listening = (['SIGINT', 'SIGTERM'] as const).map((sig) => [sig, () => onSignal(sig)] as const);
    for (const [sig, f] of listening) process.on(sig, f);
    const namingFrom = performance.now();
    let said = false;
    const naming = raws.size;
    const step = async () => {
      await new Promise<void>((r) => setImmediate(r));
      if (interrupted) throw new Interrupted();
      if (!said && performance.now() - namingFrom > 1000) {
        said = true;
        process.stderr.write(`mimalloc-pprof: naming the profile${naming === 1 ? '' : `s of ${naming} processes`}… (Ctrl-C keeps the raw profile${naming === 1 ? '' : 's'} instead)\n`);
      }
    };
    const done = new Set<number>();
    try {
      // MIMALLOC_PPROF_TEST_NAMING_DELAY_MS: the tests' window for a signal during naming
      const delay = Number(process.env.MIMALLOC_PPROF_TEST_NAMING_DELAY_MS) || 0;
      for (let waited = 0; waited < delay; waited += 50) {
        await new Promise((r) => setTimeout(r, 50));
        await step();
      }
      for (const p of processes) {
        if (!raws.has(p.pid)) continue;
        await step();
        await post.finishProfile(opts, runDir, p, copies, codeLogs, startedUnixMs, step);
        done.add(p.pid);
      }
    } catch (e) {
      if (!(e instanceof Interrupted) || interrupted === undefined) throw e;
      const kept: { pid: number; file: string; perfMap?: string }[] = [];
      for (const pid of [...raws].filter((pid) => !done.has(pid)).sort((a, b) => (a === mainPid ? -1 : b === mainPid ? 1 : a - b))) {
        const file = resolve(rawPath(opts.out, pid));
        try {
          copyFileSync(join(runDir, `raw.${pid}.pb`), file);
          chmodSync(file, 0o600);
          kept.push({ pid, file, ...keepPerfMap(pid, file) });
        } catch {
          // not writable now: lost, and said so by its absence
        }
        try {
          rmSync(perfMapOf(pid), { force: true }); // kept beside the raw profile, or of no use
        } catch {
          // not ours to remove (another user's, in sticky /tmp)
        }
      }
      const written = processes.filter((p) => done.has(p.pid) && p.file !== undefined).map((p) => ({ pid: p.pid, file: p.file! }));
      result.interrupted = { signal: interrupted, raw: kept, written };
      result.status = 128 + (osConstants.signals[interrupted] ?? 15);
      return result;
    } finally {
      for (const [sig, f] of listening) process.removeListener(sig, f);
    }
    if (!raws.has(mainPid)) result.noProfile = whyNoProfile(cmd, code, signal);
    return result;
  } finally {
    rmSync(runDir, { recursive: true, force: true });
  }
}
