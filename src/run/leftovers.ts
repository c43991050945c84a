/**
 * What a run leaves on the machine, and how it is found and removed. Every file a run makes
 * lives in one private folder (`mimalloc-pprof-run-*` in the temporary folder), except two
 * that V8 insists on: `/tmp/perf-<pid>.map` (its perf map, read to name JavaScript frames) and
 * `isolate-<address>-<pid>-v8.log` in the process's working directory (written whenever
 * --perf-basic-prof is on; its --logfile cannot be set through NODE_OPTIONS; the exit hook
 * turns its code events on, and run moves it into its folder to name inlined functions:
 * src/symbolize/v8-log.ts).
 *
 * The preload leaves `loaded.<pid>` in the folder for each process it reached (see
 * native/src/lifecycle.c): its working directory (a line), its parent's pid (a line) and its
 * command line (the rest, each argument ended by NUL).
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { basename, join } from 'node:path';

import { FileAccessError } from '../errors.js';

/** One process the preload reached. */
export interface ProcessMarker {
  pid: number;
  /** Its working directory at start ('' when unknown). */
  cwd: string;
  /** Its parent's pid (0 when unknown). */
  ppid: number;
  /** Its command line as the kernel has it (empty when unknown). */
  argv: string[];
}

/** The processes the preload reached during the run, in pid order. */
export function readMarkers(runDir: string): ProcessMarker[] {
  const markers: ProcessMarker[] = [];
  for (const f of readdirSync(runDir)) {
    const pid = /^loaded\.(\d+)$/.exec(f)?.[1];
    if (pid === undefined) continue;
    let text = '';
    try {
      text = readFileSync(join(runDir, f), 'latin1');
    } catch {
      /* removed meanwhile: the pid alone */
    }
    const first = text.indexOf('\n');
    const second = first < 0 ? -1 : text.indexOf('\n', first + 1);
    const cwd = first < 0 ? '' : Buffer.from(text.slice(0, first), 'latin1').toString('utf8');
    const ppid = second < 0 ? 0 : Number(text.slice(first + 1, second)) || 0;
    const argv =
      second < 0
        ? []
        : Buffer.from(text.slice(second + 1), 'latin1')
            .toString('utf8')
            .split('\0')
            .filter((a, i, all) => i < all.length - 1 || a !== '');
    markers.push({ pid: Number(pid), cwd: cwd.startsWith('/') ? cwd : '', ppid, argv });
  }
  return markers.sort((a, b) => a.pid - b.pid);
}

export const perfMapOf = (pid: number): string => `/tmp/perf-${pid}.map`;

/**
 * Removes the V8 logs of the run's processes, in the run's folder and in each one's working
 * directory, and the perf maps of those whose profile was not read (a process killed before
 * it could write one; the others' maps are removed once read).
 */
export function removeV8Leftovers(runDir: string, markers: readonly ProcessMarker[], launchedFrom: string): void {
  const wanted = new Set(markers.map((m) => String(m.pid)));
  const dirs = new Set([launchedFrom, ...markers.map((m) => m.cwd).filter((d) => d !== '')]);
  for (const m of markers) if (!existsSync(join(runDir, `raw.${m.pid}.pb`))) rmSync(perfMapOf(m.pid), { force: true });
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

/**
 * A detached shell that outlives a `run` killed by SIGKILL: it removes the run's folder and
 * the perf maps and V8 logs of its processes. (The program itself dies with `run`: the
 * preload asks for PR_SET_PDEATHSIG.) A run that ends normally removes them itself; the
 * watchdog then finds nothing and ends within a second.
 */
export function startWatchdog(runDir: string): void {
  const script =
    'while kill -0 "$1" 2>/dev/null; do sleep 1; done; ' +
    'for f in "$2"/loaded.*; do [ -e "$f" ] || continue; p=${f##*.}; d=; IFS= read -r d < "$f"; rm -f "/tmp/perf-$p.map"; ' +
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

const SPLITTING = /[\s:,"'\\$]/;

/**
 * LD_PRELOAD splits on spaces and colons and NODE_OPTIONS on spaces, with no way to quote in
 * the first: a file whose path holds one (an install under "My Projects") is reached through a
 * link of the same name in the run's folder. Node resolves the link for `require`, the loader
 * loads the target: the program sees the real file.
 */
export function unsplittable(file: string, runDir: string): string {
  // whitespace and colons split; quotes and backslashes are NODE_OPTIONS's escapes; commas
  // split Deno's --allow-ffi list
  if (!SPLITTING.test(file)) return file;
  const link = join(runDir, basename(file).replace(new RegExp(SPLITTING.source, 'g'), '_'));
  if (SPLITTING.test(link)) throw new FileAccessError(`run: the temporary folder ${runDir} holds a space, a colon or a quote: set TMPDIR to one without`);
  if (!existsSync(link)) symlinkSync(file, link);
  return link;
}
