/**
 * The part of a run that names and writes profiles (and watches the program's code copies
 * while it runs): loaded once the program has been started, while it runs, so that run's own
 * start-up before the program's first line is the part of src/run/index.ts alone.
 */
import { chmodSync, copyFileSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { debuglog } from 'node:util';

import { Profile as ProfileCodec } from '../profile/pprof.js';
import { encodeHeapText, encodeProfile, findSampleType, totalValue } from '../profile/index.js';
import { writeFileAtomic } from '../profile/files.js';
import { injectAnchoredJsSamples, type JsAnchors, trimAnchoredJsSamples } from '../profile/js-anchors.js';
import { mergeJsHeap, type V8SamplingHeapProfile } from '../profile/js-heap.js';
import { annotatePeak } from '../profile/peak.js';
import { formatRssComment, type RssBreakdown } from '../profile/rss.js';
import { humanBytes } from '../cli/top.js';
import { withoutJsHeap } from '../cli/convert.js';
import { codeCopiesFromSnapshot, codeCopiesOf, type CodeCopy } from '../symbolize/code-copies.js';
import { persistDemangled, saveDemangled } from '../symbolize/demangle.js';
import { isPreloadLibrary, symbolize } from '../symbolize/index.js';
import { recordedNumber } from '../symbolize/raw.js';
import { readV8Logs, V8LogFollower, v8LogsIn } from '../symbolize/v8-log.js';
import { packageVersion, seriesPath, withPid, type ProcessReport, type RunOptions } from './index.js';
import { perfMapOf, readMarkers, type ProcessMarker } from './leftovers.js';

const debug = debuglog('mimalloc-pprof');

// the names of node's functions, demangled once rather than in every run
persistDemangled();

/** Calls `look` with the run's processes (the preload's markers) every `everyMs` while the
 * program runs, first after `firstMs`; never when `on` is false. `look()` looks now;
 * `stop()` ends it. */
function whileRunning(runDir: string, on: boolean, firstMs: number, everyMs: number, look: (markers: ProcessMarker[]) => void): { look(): void; stop(): void } {
  let stopped = false;
  const now = () => {
    if (stopped) return;
    let markers: ProcessMarker[];
    try {
      markers = readMarkers(runDir);
    } catch {
      return; // the run's folder gone (the run ending)
    }
    try {
      look(markers);
    } catch {
      // what could not be looked at now is looked at next time, or by the naming after the end
    }
  };
  const timer = on ? setInterval(now, everyMs) : undefined;
  timer?.unref();
  const first = on && firstMs < everyMs ? setTimeout(now, firstMs) : undefined;
  first?.unref();
  return {
    look: now,
    stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      if (first) clearTimeout(first);
    },
  };
}

/** Where each process of the run had code outside its recorded mappings (V8's copy of its
 * builtins: src/symbolize/code-copies.ts). */
export interface CodeCopies {
  /** The copies of `pid`: what was seen of it while it ran (looked at again now unless
   * `final`), and what its threads' exit hooks recorded. */
  of(pid: number, final: boolean): CodeCopy[];
  stop(): void;
}

/**
 * Looks at every process of the run (the preload's markers) once a second while the program
 * runs, so that processes that end without the exit hook (a signal, a C program, --every's
 * profiles of a live process) have their copies too; the exit hook's record of the process
 * as it was when dumped comes first once it has ended.
 */
export function watchCodeCopies(runDir: string, on: boolean): CodeCopies {
  const seen = new Map<number, Map<string, CodeCopy>>();
  let stopped = false;
  const watch = whileRunning(runDir, on, 200, 1000, (markers) => {
    for (const { pid } of markers) {
      const found = codeCopiesOf(pid);
      if (found.length === 0) continue;
      const known = seen.get(pid) ?? new Map<string, CodeCopy>();
      for (const c of found) known.set(`${c.start}:${c.file}:${c.fileOffset}`, c);
      seen.set(pid, known);
    }
  });
  return {
    of(pid, final) {
      if (!final && !stopped) watch.look();
      // what was seen while it ran, then what its threads recorded as they ended (newer wins)
      const all = [...(seen.get(pid)?.values() ?? [])];
      let names: string[] = [];
      try {
        names = readdirSync(runDir);
      } catch {
        names = [];
      }
      const snapshots = names.filter((f) => f === `maps.${pid}.txt` || (f.startsWith(`maps.${pid}.t`) && f.endsWith('.txt')));
      for (const f of snapshots.sort((a, b) => statSync(join(runDir, a)).mtimeMs - statSync(join(runDir, b)).mtimeMs)) {
        const heads = join(runDir, f.replace(/^maps\./, 'pageheads.').replace(/\.txt$/, '.bin'));
        try {
          all.push(...codeCopiesFromSnapshot(readFileSync(join(runDir, f), 'utf8'), existsSync(heads) ? readFileSync(heads) : undefined));
        } catch {
          // removed meanwhile
        }
      }
      return all;
    },
    stop() {
      stopped = true;
      watch.stop();
    },
  };
}

/**
 * V8's code logs of the run's processes (src/symbolize/v8-log.ts: the functions the JIT
 * inlined), read as they grow while the program runs (every LOG_FOLLOW_MS), so that naming
 * after its end reads only what came last: a compiler's run writes tens of MB (tsc: 13.7 MB,
 * 0.2 s to parse; bench/README.md, "run: what it adds around a program").
 */
export interface CodeLogs {
  /** symbolize's options for `pid`: its logs kept in the run's folder (`v8log.<pid>.<n>.log`),
   * else those still in `dirs` (its working directory), and where in its perf map the log
   * started. */
  of(pid: number, dirs: readonly string[]): { v8Log?: ReturnType<typeof readV8Logs>; v8LogFrom?: number };
  stop(): void;
}

const LOG_FOLLOW_MS = 500;

export function followCodeLogs(runDir: string, on: boolean): CodeLogs {
  const followers = new Map<number, V8LogFollower>();
  const watch = whileRunning(runDir, on, LOG_FOLLOW_MS, LOG_FOLLOW_MS, (markers) => {
    for (const m of markers) {
      if (!existsSync(join(runDir, `v8log.${m.pid}.json`))) continue; // not Node, or not yet started
      const paths = [...new Set([m.cwd, process.cwd()].filter((d) => d !== ''))].flatMap((d) => v8LogsIn(d, m.pid));
      if (paths.length === 0) continue;
      const follower = followers.get(m.pid) ?? new V8LogFollower();
      followers.set(m.pid, follower);
      follower.updatePaths(paths);
    }
  });
  return {
    of(pid, dirs) {
      const started = join(runDir, `v8log.${pid}.json`);
      if (!existsSync(started)) return {}; // the log was not turned on (not Node, or it failed)
      let kept: string[] = [];
      try {
        kept = readdirSync(runDir)
          .filter((f) => f.startsWith(`v8log.${pid}.`) && f.endsWith('.log'))
          .map((f) => join(runDir, f));
      } catch {
        kept = [];
      }
      const paths = kept.length > 0 ? kept : [...new Set(dirs)].flatMap((d) => v8LogsIn(d, pid));
      if (paths.length === 0) return {};
      try {
        const { perfMapBytes } = JSON.parse(readFileSync(started, 'utf8')) as { perfMapBytes: number };
        // the rest of each log the follower knows; a log it never saw (a copy made across file
        // systems is another file) means reading them all afresh, and nothing into the
        // follower's index: one log read twice would count its code objects twice
        const follower = followers.get(pid);
        const known = follower !== undefined && follower.follows(paths);
        if (known) follower.updatePaths(paths);
        const v8Log = known ? follower.log : readV8Logs(paths);
        return { v8Log, v8LogFrom: perfMapBytes };
      } catch {
        return {};
      }
    },
    stop: watch.stop,
  };
}

/** Moves V8's logs of the run's processes into the run's folder (read there once each
 * process's profile is named; removed with it), before the leftovers are cleaned up. */
export function keepV8Logs(runDir: string, markers: readonly ProcessMarker[], launchedFrom: string): void {
  for (const m of markers) {
    if (!existsSync(join(runDir, `v8log.${m.pid}.json`))) continue;
    let n = 0;
    for (const dir of new Set([m.cwd, launchedFrom].filter((d) => d !== ''))) {
      for (const f of v8LogsIn(dir, m.pid)) {
        const to = join(runDir, `v8log.${m.pid}.${n++}.log`);
        try {
          renameSync(f, to);
          chmodSync(to, 0o600);
        } catch {
          try {
            copyFileSync(f, to); // another file system
            chmodSync(to, 0o600);
            rmSync(f, { force: true });
          } catch {
            // unreadable: its inlined functions show as their callers
          }
        }
      }
    }
  }
}

/**
 * The periodic profiles of --every: the library writes raw ones into the run's folder; they
 * are named (ELF symbols, V8's perf map as it is then) and written beside `out` as they come.
 * V8 writes its perf map through a buffer, so code compiled shortly before a profile may not
 * be in it yet: stop(), once the program has ended and its map is complete, names every one
 * again, overwrites it, and lists them.
 */
export function startSeries(opts: RunOptions, runDir: string, copies: CodeCopies, codeLogs: CodeLogs): { stop(): { pid: number; n: number; file: string }[] } {
  const written = new Map<string, { pid: number; n: number; file: string }>();
  const sweep = (final: boolean) => {
    let names: string[];
    try {
      names = readdirSync(runDir);
    } catch {
      return;
    }
    const raws = names
      .flatMap((f) => {
        const m = /^every\.(\d+)\.(\d+)\.pb$/.exec(f);
        return m ? [{ f, pid: Number(m[1]), n: Number(m[2]) }] : [];
      })
      .sort((a, b) => a.pid - b.pid || a.n - b.n);
    // V8's code log (inlined functions) once the program has ended and its logs are whole
    const logs = new Map<number, ReturnType<CodeLogs['of']>>();
    const logOf = (pid: number) => {
      if (!final) return {};
      if (!logs.has(pid)) {
        let cwd = '';
        try {
          cwd = readMarkers(runDir).find((m) => m.pid === pid)?.cwd ?? '';
        } catch {
          cwd = '';
        }
        logs.set(pid, codeLogs.of(pid, [cwd, process.cwd()].filter((d) => d !== '')));
      }
      return logs.get(pid)!;
    };
    for (const { f, pid, n } of raws) {
      const path = join(runDir, f);
      if (!final && written.has(f)) continue;
      try {
        const perfMap = perfMapOf(pid);
        const { profile } = symbolize(ProfileCodec.decode(readFileSync(path)), {
          pid,
          perfMapPath: existsSync(perfMap) ? perfMap : undefined,
          trimFile: isPreloadLibrary,
          codeCopies: copies.of(pid, final),
          ...logOf(pid),
        });
        profile.comment.push(profile.stringTable.dedup(`mimalloc-pprof ${packageVersion()} run --every: profile ${n} of pid=${pid}`));
        const file = resolve(seriesPath(opts.out, pid, n));
        writeFileAtomic(file, encodeProfile(profile));
        written.set(f, { pid, n, file });
      } catch (e) {
        debug('series %s: %s', f, e instanceof Error ? e.message : String(e));
      }
      if (final) rmSync(path, { force: true });
    }
  };
  const timer = setInterval(() => sweep(false), Math.max(250, Math.min(2000, (opts.every ?? 1000) / 2)));
  timer.unref();
  return {
    stop() {
      clearInterval(timer);
      sweep(true);
      return [...written.values()].sort((a, b) => a.pid - b.pid || a.n - b.n);
    },
  };
}

/**
 * Names one process's raw profile, records who it was, and writes it. `step` is awaited
 * between the phases (decoding, naming, merging, encoding): run's signal handlers and its
 * progress line get their turn there.
 */
export async function finishProfile(opts: RunOptions, runDir: string, p: ProcessReport, copies: CodeCopies, codeLogs: CodeLogs, startedUnixMs: number | undefined, step: () => Promise<void>): Promise<void> {
  const started = performance.now();
  // --peak: the in-use figures of the high-water mark (the library wrote both at exit)
  const peakFile = join(runDir, `peak.${p.pid}.pb`);
  const atPeak = opts.peak === true && existsSync(peakFile);
  const raw = ProfileCodec.decode(readFileSync(atPeak ? peakFile : join(runDir, `raw.${p.pid}.pb`)));
  // the JavaScript heap and the resident set were measured at exit, not at the peak
  const jsHeapFile = join(runDir, `jsheap.${p.pid}.json`);
  const js =
    opts.jsHeap && !atPeak && existsSync(jsHeapFile)
      ? (JSON.parse(readFileSync(jsHeapFile, 'utf8')) as { interval: number; profile: V8SamplingHeapProfile; anchors?: JsAnchors })
      : undefined;
  // V8's samples whose native stacks the library kept are named with the native ones
  const anchored = js ? injectAnchoredJsSamples(raw, js.profile, js.interval, js.anchors) : new Set<number>();
  await step();
  const perfMap = perfMapOf(p.pid);
  const cut = join(runDir, `perfmap.${p.pid}.json`); // the map's size at the dump (Node's exit hook)
  const perfMapBytes = existsSync(cut) ? (JSON.parse(readFileSync(cut, 'utf8')) as { bytes: number }).bytes : undefined;
  const { profile } = symbolize(raw, {
    pid: p.pid,
    perfMapPath: existsSync(perfMap) ? perfMap : undefined,
    ...(perfMapBytes !== undefined ? { perfMapBytes } : {}),
    trimFile: isPreloadLibrary,
    codeCopies: copies.of(p.pid, true),
    ...codeLogs.of(p.pid, []),
  });
  const comment = (text: string) => profile.comment.push(profile.stringTable.dedup(text));
  // the peak's figures say so, with their standard error and when (src/profile/peak.ts)
  if (atPeak) {
    const peak = annotatePeak(profile, humanBytes, startedUnixMs);
    if (peak) p.peak = peak;
  }
  await step();
  if (js) {
    const trimmed = trimAnchoredJsSamples(profile);
    // V8's stacks for those: with no JavaScript frame on the native one, or the profiler's own
    // work (which V8's stacks leave out as well)
    for (const o of [...trimmed.unplaced, ...trimmed.own]) anchored.delete(o);
    const merged = mergeJsHeap(profile, js.profile, js.interval, anchored);
    comment(`heap=js: V8's sampling heap profiler at interval=${js.interval}: ${Math.round(merged.bytes)} bytes of JavaScript objects in use (${merged.samples} samples)`);
    const a = js.anchors;
    if (a)
      comment(
        a.refused !== undefined
          ? `heap=js: native stacks not used (${a.refused}): V8's stacks, without the functions it inlined`
          : `heap=js: ${trimmed.kept} of ${merged.samples} samples with the native stack where V8 took them (${trimmed.unplaced.size} with no JavaScript frame on it keep V8's; anchors made=${a.made} live=${a.live} dropped=${a.dropped})`,
      );
  }
  const gcFile = join(runDir, `gc.${p.pid}.json`);
  if (!atPeak && existsSync(gcFile)) {
    const gc = JSON.parse(readFileSync(gcFile, 'utf8')) as NonNullable<ProcessReport['gc']>;
    p.gc = gc;
    comment(
      `exit: a full garbage collection before this profile freed ${Math.max(0, Math.round(gc.nativeBefore - gc.nativeAfter))} bytes of native memory (estimated) and ${Math.max(0, gc.jsBefore - gc.jsAfter)} bytes of JavaScript heap`,
    );
  }
  const rssFile = join(runDir, `rss.${p.pid}.json`);
  if (!atPeak && existsSync(rssFile)) {
    const rss = JSON.parse(readFileSync(rssFile, 'utf8')) as RssBreakdown;
    comment(formatRssComment(rss));
    p.rss = rss;
  }
  comment(`mimalloc-pprof ${packageVersion()} run: interval=${opts.interval ?? 524288} seed=${opts.seed ?? 'none'} pid=${p.pid}`);
  if (p.ppid) comment(`ppid=${p.ppid}`);
  if (p.argv.length > 0 && opts.cmdline !== false) comment(`command: ${p.argv.join(' ')}`);
  const out = p.main ? opts.out : withPid(opts.out, p.pid);
  // heap_v2 text has native addresses only: JavaScript-heap samples would be `0x0` rows
  saveDemangled();
  await step();
  writeFileAtomic(out, opts.format === 'proto' ? encodeProfile(profile) : encodeHeapText(withoutJsHeap(profile).profile, out));
  rmSync(perfMap, { force: true });
  debug('postprocess pid=%d samples=%d ms=%s', p.pid, profile.sample.length, (performance.now() - started).toFixed(1));
  p.file = resolve(out);
  p.profile = profile;
  const inuse = findSampleType(profile, 'inuse_space');
  p.inuseBytes = inuse >= 0 ? totalValue(profile, inuse) : 0;
  const peak = recordedNumber(profile, 'peak_rss');
  if (peak !== undefined && peak > 0) p.peakRssBytes = peak;
}

