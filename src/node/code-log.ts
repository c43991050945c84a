/**
 * V8's code log for the in-process API: the functions TurboFan and Maglev inline are named as
 * themselves, as under `run` (src/symbolize/v8-log.ts). With `--perf-basic-prof` (which the
 * API needs for JavaScript names) V8 has its log open already, `isolate-0x<isolate>-<pid>-v8.log`
 * in the directory that was current when the isolate started; this turns its code events on,
 * once, and remembers how far the perf map and each open log had been written then: the
 * profiling worker reads the logs from there (found by the descriptors V8 holds, wherever they
 * are) and matches code objects between log and map from that point (V8LogFollower). Under
 * `run` its exit hook has done so as Node started, and recorded the perf map's point in the
 * run's folder: that one is used. MIMALLOC_PPROF_V8_LOG=0 leaves it off (inlined functions then
 * show as their caller). Code optimised before the log started keeps its inlined functions
 * under the caller.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import v8 from 'node:v8';

import { v8LogsOpenHere, type LogStarts } from '../symbolize/v8-log.js';

export interface CodeLogStart {
  /** the perf map's size when the code events began */
  perfMapBytes: number;
  /** each open log's size then */
  starts: LogStarts;
}

let started: CodeLogStart | null | undefined; // null: tried, and off

const sizes = (): LogStarts => {
  const out: Record<string, number> = {};
  for (const path of v8LogsOpenHere()) {
    try {
      out[path] = statSync(path).size;
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
};

/** Turns the code log on (once) where it can be; its start, or undefined when it is off. */
export function ensureCodeLog(): CodeLogStart | undefined {
  if (started !== undefined) return started ?? undefined;
  started = null;
  if (process.env.MIMALLOC_PPROF_V8_LOG === '0') return undefined;
  const runDir = process.env.MIMALLOC_PPROF_RUN_DIR;
  if (runDir !== undefined && runDir !== '') {
    try {
      const { perfMapBytes } = JSON.parse(readFileSync(join(runDir, `v8log.${process.pid}.json`), 'utf8')) as { perfMapBytes: number };
      if (Number.isSafeInteger(perfMapBytes)) started = { perfMapBytes, starts: {} }; // run's start: the logs from their beginning
    } catch {
      /* run did not start one (MIMALLOC_PPROF_V8_LOG=0, or no perf map): neither does this */
    }
    return started ?? undefined;
  }
  let perfMapBytes: number;
  try {
    perfMapBytes = statSync(`/tmp/perf-${process.pid}.map`).size; // line-buffered: exact
  } catch {
    return undefined; // no --perf-basic-prof: no log open, and no JavaScript names either
  }
  const starts = sizes();
  v8.setFlagsFromString('--log-code');
  v8.setFlagsFromString('--log-source-position');
  started = { perfMapBytes, starts };
  return started;
}
