/**
 * Run inside every Node process that `run` profiles, as its exit hook loads (before the
 * program's code): turns on V8's code log with source positions, which names the functions
 * TurboFan and Maglev inline (src/symbolize/v8-log.ts). Neither flag is allowed in
 * NODE_OPTIONS, but V8 reads them as it logs: `--perf-basic-prof` has opened the log already
 * (`isolate-0x<isolate>-<pid>-v8.log` in the working directory). Records in the run's folder,
 * as `v8log.<pid>.json`, how far V8's perf map had been written when the log started: code
 * objects at one address are matched between the two from there on. Synchronous; any failure
 * leaves the log off (inlined functions then show as their caller).
 */
import { statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export function startV8CodeLog(dir: string): void {
  let perfMapBytes: number;
  try {
    perfMapBytes = statSync(`/tmp/perf-${process.pid}.map`).size; // line-buffered: exact
  } catch {
    return; // no perf map (no --perf-basic-prof): no log open either
  }
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const v8 = require('node:v8') as typeof import('node:v8');
  v8.setFlagsFromString('--log-code');
  v8.setFlagsFromString('--log-source-position');
  writeFileSync(join(dir, `v8log.${process.pid}.json`), JSON.stringify({ perfMapBytes }));
}
