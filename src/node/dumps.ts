/**
 * Heap profiles written to a directory: periodically, on a signal, or on demand, keeping the
 * newest N files. Configured by API (`startDumps(options)`) or by environment variables
 * (`configureFromEnv()`, or `node --import <package>/dist/src/node/auto.js`):
 *
 *   MIMALLOC_PPROF_DUMP_DIR       directory (required to enable dumps from the environment)
 *   MIMALLOC_PPROF_DUMP_INTERVAL  seconds between periodic dumps (unset: none)
 *   MIMALLOC_PPROF_DUMP_KEEP      files of this process kept, oldest removed first (default 10)
 *   MIMALLOC_PPROF_DUMP_SIGNAL    a signal that triggers a dump (unset: none); SIGUSR2, SIGHUP,
 *                                 SIGPWR or SIGWINCH — SIGUSR1 belongs to Node's inspector
 *   MIMALLOC_PPROF_DUMP_FORMAT    proto (default, .pb.gz) or text (.heap)
 *
 * Files are named <prefix>.<pid>.<UTC time>.pb.gz and written atomically (mode 0600).
 * Rotation removes only this process's files: cluster workers may share the directory, and
 * the files of processes that ended are left for whoever reads them.
 */
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';

import { requireAddon } from './addon.js';
import { FailureWindow, stderrLogger, type Logger } from './failure-window.js';
import { checkStartOptions, profiler, writeFileAtomic, type StartOptions } from './profiler.js';

export interface DumpOptions {
  /** Directory of the dumps (created when missing). Env: MIMALLOC_PPROF_DUMP_DIR. */
  dir?: string;
  /** Seconds between periodic dumps; 0 or unset: none. Env: MIMALLOC_PPROF_DUMP_INTERVAL. */
  intervalSeconds?: number;
  /** How many dump files of this prefix and process to keep (default 10). Env: MIMALLOC_PPROF_DUMP_KEEP. */
  keep?: number;
  /** A signal that triggers a dump (default none). Env: MIMALLOC_PPROF_DUMP_SIGNAL. */
  signal?: NodeJS.Signals;
  /** proto (gzipped, .pb.gz; default) or text (heap_v2, .heap). Env: MIMALLOC_PPROF_DUMP_FORMAT. */
  format?: 'proto' | 'text';
  /** File name prefix (default `heap`). */
  prefix?: string;
  /** Where the one line per failure window goes (default stderr). */
  logger?: Logger;
  /** Start the profiler (accum on) when it is not running (default true); or the start options. */
  autoStart?: boolean | StartOptions;
}

export interface Dumps {
  /** The absolute directory. */
  readonly dir: string;
  /** Writes one dump now (joins one being written) and rotates; resolves to its path. */
  dumpNow(): Promise<string>;
  /** Stops the timer and the signal handler; dumps already started finish. */
  stop(): void;
}

/** Signals that may trigger a dump: ones whose default action the application does not rely on. */
export const DUMP_SIGNALS: readonly NodeJS.Signals[] = ['SIGUSR2', 'SIGHUP', 'SIGPWR', 'SIGWINCH'];

const KEYS = new Set(['dir', 'intervalSeconds', 'keep', 'signal', 'format', 'prefix', 'logger', 'autoStart']);

function envInt(env: NodeJS.ProcessEnv, name: string, min: number): number | undefined {
  const v = env[name];
  if (v === undefined || v === '') return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min) throw new TypeError(`${name} must be an integer of at least ${min}, not '${v}'`);
  return Number(v);
}

/** Dump options from the environment (undefined fields where a variable is unset). */
export function dumpOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): DumpOptions {
  const o: DumpOptions = {};
  if (env.MIMALLOC_PPROF_DUMP_DIR) o.dir = env.MIMALLOC_PPROF_DUMP_DIR;
  const interval = envInt(env, 'MIMALLOC_PPROF_DUMP_INTERVAL', 0);
  if (interval !== undefined) o.intervalSeconds = interval;
  const keep = envInt(env, 'MIMALLOC_PPROF_DUMP_KEEP', 1);
  if (keep !== undefined) o.keep = keep;
  if (env.MIMALLOC_PPROF_DUMP_SIGNAL) o.signal = env.MIMALLOC_PPROF_DUMP_SIGNAL as NodeJS.Signals;
  const format = env.MIMALLOC_PPROF_DUMP_FORMAT;
  if (format) {
    if (format !== 'proto' && format !== 'text') throw new TypeError(`MIMALLOC_PPROF_DUMP_FORMAT must be proto or text, not '${format}'`);
    o.format = format;
  }
  return o;
}

function checkSignal(signal: string): void {
  if (signal === 'SIGUSR1') {
    throw new TypeError('dumps: SIGUSR1 belongs to Node\'s inspector (it opens the debugger port); use SIGUSR2');
  }
  if (!(DUMP_SIGNALS as readonly string[]).includes(signal)) {
    throw new TypeError(`dumps: signal must be one of ${DUMP_SIGNALS.join(', ')}, not '${signal}'`);
  }
}

function stamp(d: Date): string {
  return d.toISOString().replace(/[-:]/g, ''); // 20250102T030405.678Z
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Starts dumps to a directory. Options not given are taken from the environment (see the
 * file comment); `dir` is required one way or the other. Throws NotPreloadedError without
 * the preload, TypeError for a bad option.
 */
export function startDumps(options: DumpOptions = {}, env: NodeJS.ProcessEnv = process.env): Dumps {
  for (const k of Object.keys(options)) if (!KEYS.has(k)) throw new TypeError(`startDumps: unknown option '${k}'`);
  const o: DumpOptions = { ...dumpOptionsFromEnv(env), ...options };
  if (!o.dir) throw new TypeError('startDumps: no directory (the dir option, or MIMALLOC_PPROF_DUMP_DIR)');
  const interval = o.intervalSeconds ?? 0;
  if (typeof interval !== 'number' || !Number.isFinite(interval) || interval < 0) {
    throw new TypeError(`startDumps: intervalSeconds must be a non-negative number, not ${String(interval)}`);
  }
  const keep = o.keep ?? 10;
  if (!Number.isInteger(keep) || keep < 1) throw new TypeError(`startDumps: keep must be an integer of at least 1, not ${String(keep)}`);
  if (o.signal !== undefined) checkSignal(o.signal);
  const format = o.format ?? 'proto';
  if (format !== 'proto' && format !== 'text') throw new TypeError(`startDumps: format must be 'proto' or 'text'`);
  const prefix = o.prefix ?? 'heap';
  if (!/^[A-Za-z0-9_-]+$/.test(prefix)) throw new TypeError('startDumps: prefix may hold only letters, digits, _ and -');
  const autoStart = o.autoStart ?? true;
  const startOptions: StartOptions = autoStart === true ? { accum: true } : autoStart === false ? {} : { accum: true, ...autoStart };
  if (autoStart !== false) checkStartOptions(startOptions);
  requireAddon();
  if (autoStart !== false && !profiler.isRunning()) profiler.start(startOptions);

  const dir = resolve(o.dir);
  const ext = format === 'proto' ? '.pb.gz' : '.heap';
  const pattern = new RegExp(`^${escape(prefix)}\\.(\\d+)\\.(\\d{8}T\\d{6}\\.\\d{3}Z)(?:-(\\d+))?\\.(?:pb\\.gz|heap)$`);
  const failures = new FailureWindow(o.logger ?? stderrLogger, `dump to ${dir}`);
  let last = '';
  let seq = 0;
  let current: Promise<string> | undefined;

  const rotate = async () => {
    const files = (await readdir(dir))
      .map((f) => ({ f, m: pattern.exec(f) }))
      // only this process's files: cluster workers and restarts may share the directory
      .filter((x): x is { f: string; m: RegExpExecArray } => x.m !== null && x.m[1] === String(process.pid))
      .sort((a, b) => (a.m[2]! < b.m[2]! ? -1 : a.m[2]! > b.m[2]! ? 1 : Number(a.m[3] ?? 0) - Number(b.m[3] ?? 0)));
    for (const { f } of files.slice(0, Math.max(0, files.length - keep))) await rm(join(dir, f), { force: true });
  };

  const dumpOnce = async (): Promise<string> => {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const t = stamp(new Date());
    seq = t === last ? seq + 1 : 0;
    last = t;
    const path = join(dir, `${prefix}.${process.pid}.${t}${seq > 0 ? `-${seq}` : ''}${ext}`);
    await writeFileAtomic(path, await profiler.profile({ format }));
    await rotate();
    return path;
  };

  const dumpNow = (): Promise<string> => {
    current ??= dumpOnce().finally(() => {
      current = undefined;
    });
    return current;
  };

  const background = () => {
    dumpNow().then(
      () => failures.ok(),
      (e: unknown) => failures.fail(e instanceof Error ? e.message : String(e), 'the next dump is tried as scheduled'),
    );
  };

  const timer = interval > 0 ? setInterval(background, interval * 1000) : undefined;
  timer?.unref();
  const onSignal = () => background();
  if (o.signal) process.on(o.signal, onSignal);

  return {
    dir,
    dumpNow,
    stop() {
      if (timer) clearInterval(timer);
      if (o.signal) process.removeListener(o.signal, onSignal);
    },
  };
}

/**
 * Starts dumps when MIMALLOC_PPROF_DUMP_DIR is set (see the file comment); else does
 * nothing and returns undefined.
 */
export function configureFromEnv(env: NodeJS.ProcessEnv = process.env): Dumps | undefined {
  if (!env.MIMALLOC_PPROF_DUMP_DIR) return undefined;
  return startDumps({}, env);
}
