/**
 * One run of the command under one arm, through the rusage helper (build/mpp-rusage, built
 * from native/tools/mpp-rusage.c by `npm install`): wall time from the helper's monotonic
 * clock, CPU, peak RSS, faults and context switches from wait4. The command's stdin and
 * stdout are /dev/null; the tail of its stderr is kept to explain a failure.
 *
 * The counting run: the command once more, on this package's preload library with
 * MIMALLOC_MEMORY_EVENTS=1 (every call takes the counting path) and a profile dumped at exit
 * by each process; the exact counters (allocations, and bytes in mimalloc's usable sizes) are
 * summed over the processes that reached exit(). It is never timed: the counters' cost stays
 * out of the figures.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';

import { LibraryMissingError } from '../errors.js';
import { buildHint, libraryPath, nativeSource } from '../preload/library.js';
import type { Arm } from './allocators.js';

export const HELPER_FILE = 'mpp-rusage';

/** The rusage helper; a missing one is an error that names the fix. */
export function helperPath(): string {
  const p = join(nativeSource().dir, HELPER_FILE);
  if (!existsSync(p)) {
    throw new LibraryMissingError(
      `compare's run helper is not built (${p} is missing): ${buildHint()}`,
    );
  }
  return p;
}

/** What wait4 and the clock said about one run. */
export interface Measurement {
  wallS: number;
  userS: number;
  sysS: number;
  cpuS: number;
  maxrssBytes: number;
  minflt: number;
  majflt: number;
  nvcsw: number;
  nivcsw: number;
}

export interface RunResult {
  ok: boolean;
  /** null when the run failed */
  m: Measurement | null;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  /** why the run failed, in words */
  failure?: string;
  /** the last lines of the command's stderr, for a failed run */
  stderrTail?: string;
  pid?: number;
}

interface HelperReport {
  wall_ns: number;
  utime_us: number;
  stime_us: number;
  maxrss_kib: number;
  minflt: number;
  majflt: number;
  nvcsw: number;
  nivcsw: number;
  exited: number;
  exit_code: number;
  signal: number;
  timed_out: number;
  exec_errno: number;
  pid: number;
}

/** Variables that would change the allocator of every arm alike: each arm sets its own. */
export function baseEnvironment(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) continue;
    if (k === 'LD_PRELOAD' || k.startsWith('MIMALLOC_PROF') || k === 'MIMALLOC_MEMORY_EVENTS' || k.startsWith('MIMALLOC_PPROF_')) continue;
    out[k] = v;
  }
  return out;
}

export { preloadObstacle, which } from '../preload/launch.js';

/** Which allocator serves malloc under `library` (the helper's --identify, run under the preload). */
export function identify(library: string | undefined, env: Record<string, string>): { allocator: string; miVersion: number; error?: string } {
  const r = spawnSync(helperPath(), ['--identify'], {
    encoding: 'utf8',
    env: library ? { ...env, LD_PRELOAD: library } : env,
    timeout: 30_000,
  });
  const preloadError = /ERROR: ld\.so: object .* cannot be preloaded[^\n]*/.exec(r.stderr ?? '')?.[0];
  try {
    const j = JSON.parse(r.stdout) as { allocator: string; mi_version: number };
    return { allocator: j.allocator, miVersion: j.mi_version, ...(preloadError ? { error: preloadError } : {}) };
  } catch {
    return { allocator: 'unknown', miVersion: 0, error: preloadError ?? `the helper failed: ${(r.stderr ?? '').trim().split('\n')[0] ?? ''}` };
  }
}

const TAIL = 2048;

/** Keeps the last `keep` characters of a stream; `done` resolves at its end. */
function collect(stream: Readable | null, keep: number): { text: () => string; done: Promise<void> } {
  let text = '';
  if (!stream) return { text: () => '', done: Promise.resolve() };
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    text += chunk;
    if (text.length > 4 * keep) text = text.slice(-keep);
  });
  const done = new Promise<void>((resolve) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', () => resolve());
  });
  return { text: () => text.slice(-keep), done };
}

export interface RunSpec {
  command: string[];
  arm: Arm;
  env: Record<string, string>;
  /** seconds; 0: none */
  timeout: number;
  cwd?: string;
  /** the library to preload instead of the arm's (the counting run) */
  library?: string;
}

const SIGNALS: Record<number, string> = { 1: 'SIGHUP', 2: 'SIGINT', 6: 'SIGABRT', 9: 'SIGKILL', 11: 'SIGSEGV', 13: 'SIGPIPE', 15: 'SIGTERM', 7: 'SIGBUS', 8: 'SIGFPE', 4: 'SIGILL' };

/** Runs the command once under the arm; never throws for the command's own failures. */
export async function runOnce(spec: RunSpec): Promise<RunResult> {
  const library = spec.library ?? spec.arm.library;
  const args = ['--report-fd', '3', ...(library ? ['--preload', library] : []), ...(spec.timeout > 0 ? ['--timeout', String(spec.timeout)] : []), '--', ...(spec.arm.wrap ?? []), ...spec.command];
  const child = spawn(helperPath(), args, {
    cwd: spec.cwd,
    env: { ...spec.env, ...spec.arm.env },
    stdio: ['ignore', 'ignore', 'pipe', 'pipe'],
  });
  const stderr = collect(child.stderr, TAIL);
  const report = collect(child.stdio[3] as Readable | null, 1 << 16);
  // 'exit', not 'close': a background process the command left behind may hold its stderr open
  const status = await new Promise<number | null>((done, fail) => {
    child.once('error', fail);
    child.once('exit', (c) => done(c));
  });
  await report.done; // only the helper holds the report's pipe (close-on-exec for the command)
  await Promise.race([stderr.done, new Promise((r) => setTimeout(r, 200))]);
  child.stderr?.destroy();
  const tail = stderr.text().trimEnd();
  const text = report.text().trim();
  let j: HelperReport;
  try {
    j = JSON.parse(text) as HelperReport;
  } catch {
    return { ok: false, m: null, exitCode: null, signal: null, timedOut: false, failure: `the run helper failed (status ${status}): ${tail.split('\n').pop() ?? ''}`, stderrTail: tail };
  }
  const m: Measurement = {
    wallS: j.wall_ns / 1e9,
    userS: j.utime_us / 1e6,
    sysS: j.stime_us / 1e6,
    cpuS: (j.utime_us + j.stime_us) / 1e6,
    maxrssBytes: j.maxrss_kib * 1024,
    minflt: j.minflt,
    majflt: j.majflt,
    nvcsw: j.nvcsw,
    nivcsw: j.nivcsw,
  };
  const base = { exitCode: j.exited ? j.exit_code : null, signal: j.signal || null, timedOut: j.timed_out === 1, pid: j.pid };
  let failure: string | undefined;
  if (j.exec_errno) failure = `cannot execute ${spec.command[0]} (errno ${j.exec_errno})`;
  else if (j.timed_out) failure = `timed out after ${spec.timeout} s`;
  else if (!j.exited) failure = `killed by ${SIGNALS[j.signal] ?? `signal ${j.signal}`}`;
  else if (j.exit_code !== 0) failure = `exit status ${j.exit_code}`;
  if (failure) return { ok: false, m: null, ...base, failure, stderrTail: tail };
  return { ok: true, m, ...base };
}

/** The exact counters of one counting run, summed over the processes that dumped. */
export interface Counts {
  allocations: number;
  bytes: number;
  /** processes the preload was loaded in, and those that wrote their counters at exit */
  processes: number;
  counted: number;
  error?: string;
  /** counting runs made (--counts every: one per block) */
  runs?: number;
  /** a later counting run gave other figures (the command does not allocate deterministically) */
  varies?: boolean;
}

/** One counting run (see the head of this file); counters summed over processes. */
export async function countRun(spec: Omit<RunSpec, 'library'>): Promise<Counts> {
  const dir = mkdtempSync(join(tmpdir(), 'mpp-compare-count-'));
  try {
    const env = {
      ...spec.env,
      MIMALLOC_MEMORY_EVENTS: '1',
      MIMALLOC_PROF: '1',
      MIMALLOC_PROF_SAMPLE_INTERVAL: '1g',
      MIMALLOC_PROF_DUMP_AT_EXIT: join(dir, 'count.%p.heap'),
      MIMALLOC_PROF_DUMP_FORMAT: 'text',
      MIMALLOC_PPROF_RUN_DIR: dir,
    };
    const arm: Arm = { ...spec.arm, env: { ...spec.arm.env } };
    delete arm.env.MIMALLOC_PROF; // the counting run's own settings win
    const r = await runOnce({ ...spec, arm, env, library: libraryPath() });
    const files = readdirSync(dir);
    const loaded = files.filter((f) => /^loaded\.\d+$/.test(f));
    let allocations = 0;
    let bytes = 0;
    let counted = 0;
    for (const f of files.filter((x) => /^count\.\d+\.heap$/.test(x))) {
      const text = readFileSync(join(dir, f), 'utf8');
      const objects = /^# exact_accum_objects: (\d+)$/m.exec(text);
      const size = /^# exact_accum_bytes: (\d+)$/m.exec(text);
      if (!objects || !size) continue;
      allocations += Number(objects[1]);
      bytes += Number(size[1]);
      counted++;
    }
    const out: Counts = { allocations, bytes, processes: loaded.length, counted };
    if (!r.ok) out.error = `the counting run failed: ${r.failure}`;
    else if (r.pid !== undefined && !loaded.includes(`loaded.${r.pid}`)) out.error = 'the preload library did not take effect in the command (static or setuid?)';
    else if (counted === 0) out.error = 'no process reached exit() with its counters (each ended by _exit or a signal)';
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
