/** What `run` prints once the program has ended (src/cli/run.ts starts it). */
import { basename, resolve } from 'node:path';

import type { Profile } from '../profile/pprof.js';

import { formatPeak } from '../profile/peak.js';
import { holders, isProgramFunction } from '../profile/holders.js';
import { inUseEstimate, lowerBound, overBudget } from '../run/budget.js';
import { formatRssLines } from '../profile/rss.js';
import { writeHtmlReport } from '../report/index.js';
import { isProfilerScript } from '../report/data.js';
import { isLauncher, type ProcessReport, type RunResult } from '../run/index.js';
import type { CliRunOptions } from './run.js';
import { isJavaScriptName } from '../symbolize/perfmap.js';
import { humanBytes, printTop } from './top.js';

export function printRun(opts: CliRunOptions, result: RunResult): number {
  const err = process.stderr;
  if (result.kind === 'not-started') {
    err.write(`mimalloc-pprof: ${result.message}\n`);
    return result.status;
  }
  if (result.kind === 'not-preloaded') {
    err.write(`mimalloc-pprof: ERROR: ${result.message}\n`);
    return result.status;
  }
  if (result.warning) err.write(`mimalloc-pprof: warning: ${result.warning}\n`);
  if (result.interrupted) {
    const { signal, raw, written } = result.interrupted;
    for (const w of written) err.write(`mimalloc-pprof: wrote ${w.file}${w.file === resolve(opts.out) ? '' : ` (pid ${w.pid})`}\n`);
    err.write(`mimalloc-pprof: ${signal} while naming the profiles: ${raw.length === 0 ? 'no raw profile could be kept' : `kept the raw profile${raw.length === 1 ? '' : 's'} instead`}\n`);
    for (const r of raw) {
      const names = r.perfMap ? `, its JavaScript names in ${r.perfMap}` : '';
      err.write(`mimalloc-pprof: raw profile of pid ${r.pid}: ${r.file}${names} (name it with: mimalloc-pprof symbolize ${r.file})\n`);
    }
    return result.status;
  }
  if (result.followed) err.write(`mimalloc-pprof: ${result.followed.from}: started ${result.followed.to} directly, so that it is the program profiled\n`);
  if (!opts.profile) return result.status;
  const profiled = result.processes.filter((p) => p.profile);
  if (result.noProfile) {
    err.write(`mimalloc-pprof: ${profiled.length > 0 ? 'the main process wrote no profile' : 'no profile was written'}: ${result.noProfile}\n`);
    if (profiled.length === 0) return result.status;
  }
  const detailed = detailedProcess(profiled);
  if (result.processes.length > 1) printProcesses(result.processes, detailed, opts.peak === true, opts.cmdline !== false);
  if (opts.top > 0 && detailed.profile) {
    const who = detailed.argv.length > 0 ? basename(detailed.argv[0]!) : basename(opts.command[0]!);
    // --peak: the figures are the peak's, with the estimate's error and when it was reached
    const when = detailed.peak ? `at the peak: ${formatPeak(detailed.peak, humanBytes, result.startedUnixMs)}` : opts.peak ? 'at exit (no peak was recorded)' : 'at exit';
    err.write(`\nmimalloc-pprof: in-use memory of ${who} (pid ${detailed.pid}) ${when}\n`);
    const stripped = strippedExecutable(detailed.profile);
    if (stripped) err.write(`mimalloc-pprof: ${stripped} has no symbol table (stripped): its own frames show as [${stripped}]\n`);
    printTop(detailed.profile, 'inuse_space', opts.top, err);
    printJavaScriptCallers(detailed.profile, opts.top, err);
    const freed = gcHint(detailed, opts.interval ?? 524288);
    if (freed) err.write(`\n${freed}\n`);
    const allocated = allocatedHint(detailed.profile, detailed.file, detailed.peak ? 'at the peak' : 'at exit');
    if (allocated) err.write(`\n${allocated}\n`);
    if (detailed.rss) {
      err.write(`\nResident set of ${who} when profiled: ${humanBytes(detailed.rss.rss)}\n`);
      for (const line of formatRssLines(detailed.rss, humanBytes)) err.write(`${line}\n`);
    }
  }
  for (const p of profiled) err.write(`mimalloc-pprof: wrote ${p.file}${p.main ? '' : ` (pid ${p.pid})`}\n`);
  for (const [pid, files] of groupSeries(result.series ?? [])) {
    err.write(`mimalloc-pprof: wrote ${files.length} periodic profile${files.length === 1 ? '' : 's'} of pid ${pid}: ${files[0]}${files.length > 1 ? ` … ${files[files.length - 1]}` : ''}\n`);
  }
  const over = opts.budget ? overBudgetLines(opts.budget, profiled) : [];
  if ((opts.html || over.length > 0) && detailed.profile && detailed.file) {
    const html = reportPath(detailed.file);
    try {
      writeHtmlReport(html, [{ profile: detailed.profile, source: basename(detailed.file) }]);
      err.write(`mimalloc-pprof: wrote ${html}\n`);
    } catch (e) {
      // the program's status is what run answers with; the report is a convenience
      err.write(`mimalloc-pprof: the HTML report was not written: ${e instanceof Error ? e.message : String(e)}\n`);
    }
  }
  if (over.length === 0) return result.status;
  for (const line of over) err.write(`mimalloc-pprof: MEMORY BUDGET EXCEEDED: ${line}\n`);
  return result.status !== 0 ? result.status : BUDGET_EXCEEDED_STATUS;
}

/** run's status when a memory budget was exceeded and the program itself succeeded. */
export const BUDGET_EXCEEDED_STATUS = 4;

/**
 * One line per process over its budget beyond reasonable doubt (src/run/budget.ts): the
 * estimate, its standard error, the lower bound against the budget, and the functions that
 * hold the most (the program's JavaScript functions when it has any, else native sites).
 */
export function overBudgetLines(budget: NonNullable<CliRunOptions['budget']>, processes: readonly ProcessReport[]): string[] {
  const lines: string[] = [];
  for (const p of processes) {
    if (!p.profile) continue;
    // --max-peak: the peak's own estimate and error (no peak recorded: the figure at exit)
    const e = budget.of === 'peak' && p.peak ? { bytes: p.peak.bytes, stdError: p.peak.stdError } : inUseEstimate(p.profile);
    if (!overBudget(e, budget.bytes)) continue;
    const what = budget.of === 'peak' ? (p.peak ? 'at the peak' : 'at exit (no peak was recorded)') : 'at exit';
    const named = holders(p.profile, 'inuse_space', 3);
    lines.push(
      `pid ${p.pid} had ${humanBytes(e.bytes)} ± ${humanBytes(e.stdError)} in use ${what} (95 % lower bound ${humanBytes(lowerBound(e))}), over --max-${budget.of} ${humanBytes(budget.bytes)}; ` +
        `most in use under: ${named.map(([n, b]) => `${n} (${humanBytes(b)})`).join(', ')}`,
    );
  }
  return lines;
}

/**
 * What the full collection before the exit profile freed, when it freed at least one sampling
 * interval (less is below what the estimate can tell): memory that only unreachable objects
 * held, which a module scope's data is once its script has ended. Where to see it instead.
 */
export function gcHint(p: ProcessReport, interval: number): string | undefined {
  if (!p.gc) return undefined;
  const native = Math.max(0, p.gc.nativeBefore - p.gc.nativeAfter);
  const js = Math.max(0, p.gc.jsBefore - p.gc.jsAfter);
  if (native + js < interval) return undefined;
  return (
    `mimalloc-pprof: the garbage collection before this profile freed ${humanBytes(native)} of native memory (estimated) and ${humanBytes(js)} of JavaScript heap: ` +
    'memory only unreachable objects held (a module-scope variable of a script that has ended is one); ' +
    '--no-gc profiles it as it was, --peak at its high-water mark'
  );
}

/**
 * When far more was allocated over the run than was in use at its end (a program that frees
 * before it exits), where to look instead: the allocated totals every `run` profile carries.
 */
export function allocatedHint(profile: Profile, file: string | undefined, when: 'at exit' | 'at the peak' = 'at exit'): string | undefined {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const total = (name: string) => {
    const i = profile.sampleType.findIndex((t) => str(t.type) === name);
    return i < 0 ? undefined : profile.sample.reduce((a, s) => a + Number(s.value[i] ?? 0), 0);
  };
  const inuse = total('inuse_space');
  const alloc = total('alloc_space');
  if (inuse === undefined || alloc === undefined || alloc <= 4 * inuse) return undefined;
  return `mimalloc-pprof: ${humanBytes(alloc)} was allocated over the run, ${humanBytes(inuse)} was in use ${when}; where it was allocated: mimalloc-pprof top ${file ?? 'FILE'} --sample-index alloc_space`;
}

function groupSeries(series: { pid: number; n: number; file: string }[]): Map<number, string[]> {
  const out = new Map<number, string[]>();
  for (const s of series) (out.get(s.pid) ?? out.set(s.pid, []).get(s.pid)!).push(s.file);
  return out;
}

/** FILE with `.html` for its profile extension (`x.pb.gz` → `x.html`). */
export function reportPath(file: string): string {
  return `${file.replace(/\.(pb\.gz|pb|pprof|heap|txt)$/i, '')}.html`;
}

/** The program's executable (the profile's first mapping's file) when none of its frames got
 * a name. The file maps as several segments (node's first executable one is 8 KiB of stubs
 * with no frames in it), so every mapping of that file counts, and only one that frames fall
 * in says anything: a file with named frames, or no frames at all, is not reported. */
function strippedExecutable(profile: Profile): string | undefined {
  const first = profile.mapping[0];
  if (!first) return undefined;
  const file = profile.stringTable.strings[Number(first.filename)] ?? '';
  if (!file.startsWith('/')) return undefined;
  const ofFile = new Set(profile.mapping.filter((m) => Number(m.filename) === Number(first.filename)).map((m) => Number(m.id)));
  if (profile.mapping.some((m) => ofFile.has(Number(m.id)) && m.hasFunctions)) return undefined;
  const framesIn = profile.location.some((l) => ofFile.has(Number(l.mappingId)));
  return framesIn ? basename(file) : undefined;
}

/**
 * The process worth detailing: the one that held the most in use (the figure the table beside it
 * and the details show; by peak resident set where a process has none), the one run started
 * where they tie; never one that only starts the program, however much it held (npm, npx and
 * shells: `npm exec`, `npx -p …`, `npm run` that run could not follow) while there is another.
 */
export function detailedProcess(profiled: readonly ProcessReport[]): ProcessReport {
  const weight = (p: ProcessReport) => p.inuseBytes ?? p.peakRssBytes ?? 0;
  const programs = profiled.filter((p) => !isLauncher(p.argv));
  return (programs.length > 0 ? programs : profiled).reduce((a, b) => (weight(b) > weight(a) || (weight(b) === weight(a) && b.main) ? b : a));
}

/** One line per process: pid, parent, peak RSS, in use at exit (or at the peak), command line
 * (without `--no-cmdline`: the program's name only, since a log may keep what run prints). */
function printProcesses(processes: readonly ProcessReport[], detailed: ProcessReport, atPeak: boolean, cmdline: boolean): void {
  const err = process.stderr;
  err.write(`\nmimalloc-pprof: ${processes.length} processes\n`);
  err.write(`      pid   parent   peak RSS  ${atPeak ? 'in use at the peak' : '   in use'}  command\n`);
  for (const p of processes) {
    const inuse = p.profile ? humanBytes(p.inuseBytes ?? 0) : 'no profile';
    const peak = p.peakRssBytes !== undefined ? humanBytes(p.peakRssBytes) : '?';
    const mark = p === detailed ? '*' : p.main ? 'm' : ' ';
    const command = p.argv.length === 0 ? '?' : cmdline ? p.argv.join(' ') : `${basename(p.argv[0]!)}${p.argv.length > 1 ? ' …' : ''}`;
    err.write(
      `${mark} ${String(p.pid).padStart(7)}  ${String(p.ppid || '?').padStart(7)}  ${peak.padStart(9)}  ${inuse.padStart(atPeak ? 18 : 9)}  ${command.length > 100 ? `${command.slice(0, 97)}...` : command}\n`,
    );
  }
  err.write('  (m: the process run started; *: detailed below)\n');
}

/**
 * The JavaScript functions under which native memory is in use (cumulative, each function
 * once per sample): the question a Node user came with, which a flat top by native leaf
 * cannot answer. JavaScript frames are the ones named from V8's perf map (system name JS:…).
 */
function printJavaScriptCallers(profile: Profile, n: number, out: { write(s: string): unknown }): void {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const { rows, total } = javaScriptCallersWithTotal(profile, n);
  if (rows.length === 0 || total <= 0) return;
  const heaps = profile.sample.some((s) => s.label.some((l) => str(l.key) === 'heap' && str(l.str) === 'js'));
  out.write(`\nJavaScript functions with ${heaps ? 'memory (native and JavaScript heap)' : 'native memory'} in use beneath them (cumulative)\n`);
  for (const [name, bytes] of rows) {
    out.write(`${humanBytes(bytes).padStart(9)} ${((100 * bytes) / total).toFixed(2).padStart(6)}%  ${name}\n`);
  }
}

function javaScriptCallersWithTotal(profile: Profile, n: number): { rows: [string, number][]; total: number } {
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)] ?? '';
  const types = profile.sampleType.map((t) => str(t.type));
  const inuse = types.indexOf('inuse_space');
  // one row per source function, whatever tiers (interpreted, baseline, optimised) it ran in
  const display = (f: (typeof profile.function)[number]) =>
    str(f.filename) ? `${str(f.name)} ${str(f.filename)}:${Number(f.startLine)}` : str(f.name);
  // each function's row, made once, for the program's own code: Node's internals (node:…) are
  // the same for every program, and the exit hook's work (loading the addon, measuring the
  // resident set) is the profiler's
  const rowOf = new Map(
    profile.function
      .filter((f) => isProgramFunction(profile, f))
      .map((f) => [Number(f.id), display(f)]),
  );
  if (inuse < 0 || rowOf.size === 0) return { rows: [], total: 0 };
  // per location, the rows of its lines (most hold none: native code, Node's own)
  const rowsAt = new Map(profile.location.map((l) => [Number(l.id), l.line.flatMap((line) => rowOf.get(Number(line.functionId)) ?? [])]));
  const cum = new Map<string, number>();
  let total = 0;
  for (const s of profile.sample) {
    const v = Number(s.value[inuse] ?? 0);
    total += v;
    const seen = new Set<string>();
    for (const id of s.locationId)
      for (const key of rowsAt.get(Number(id)) ?? []) {
        if (!seen.has(key)) {
          seen.add(key);
          cum.set(key, (cum.get(key) ?? 0) + v);
        }
      }
  }
  return { rows: [...cum].sort((a, b) => b[1] - a[1]).slice(0, n), total };
}
