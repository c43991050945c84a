// Calls every entry point of the in-process API and prints one JSON object of outcomes:
// for each call whether it returned, resolved, threw or rejected, and with what error.
// Run with and without the preload (test/node/api.test.ts). Started with
// --import <dist>/src/node/auto.js and MIMALLOC_PPROF_DUMP_* set, so the environment
// configuration is exercised too.
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { configureFromEnv, memoryEvents, NotPreloadedError, parseProfile, pprofHandler, profiler, pushTo, startDumps, str } from 'mimalloc-pprof';

const results = {};
const error = (e) => ({ class: e?.constructor?.name, code: e?.code, notPreloaded: e instanceof NotPreloadedError, message: String(e?.message ?? e) });
async function call(name, fn) {
  let outcome;
  try {
    const v = fn();
    if (v && typeof v.then === 'function') {
      try {
        outcome = { kind: 'resolved', value: await v };
      } catch (e) {
        outcome = { kind: 'rejected', error: error(e) };
      }
    } else outcome = { kind: 'returned', value: v };
  } catch (e) {
    outcome = { kind: 'threw', error: error(e) };
  }
  results[name] = outcome;
  return outcome.value;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const dir = mkdtempSync(join(tmpdir(), 'mpp-api-'));
const retained = [];
function apiAllocations(mb) {
  for (let i = 0; i < mb * 16; i++) retained.push(Buffer.alloc(65536, 1));
}

results.available = profiler.available();
const preloaded = results.available.available;
await call('isRunning', () => profiler.isRunning());
await call('start', () => profiler.start({ accum: true }));
await call('stats', () => profiler.stats());
await call('memoryEvents.before', () => memoryEvents.snapshot());
await call('memoryEvents.enable', () => memoryEvents.enable());
apiAllocations(8);
await call('memoryEvents.snapshot', () => memoryEvents.snapshot());
await call('memoryEvents.disable', () => memoryEvents.disable());
const proto = await call('profile', () => profiler.profile());
const text = await call('profile.text', () => profiler.profile({ format: 'text' }));
const allocs = await call('profile.allocs', () => profiler.profile({ sampleType: 'alloc_space', gzip: false }));
if (preloaded) {
  results.profileFacts = {
    gzip: proto[0] === 0x1f && proto[1] === 0x8b,
    samples: parseProfile(proto).sample.length,
    hasFunction: parseProfile(proto).function.some((f) => parseProfile(proto).stringTable.strings[Number(f.name)] === 'apiAllocations'),
    textHead: text.toString().slice(0, 13),
    allocsDefault: (() => {
      const p = parseProfile(allocs);
      return str(p, p.defaultSampleType);
    })(),
    allocsGzip: allocs[0] === 0x1f,
  };
  // concurrent calls share one dump (the handler's counter counts this process's dumps). The
  // periodic dumper of MIMALLOC_PPROF_DUMP_INTERVAL=1 counts there too and may land inside the
  // window, so the window is tried again (up to 5 times) until it holds only our calls: a broken
  // coalescing gives 3 shared dumps every time.
  const counter = pprofHandler({ autoStart: false });
  for (let attempt = 1; attempt <= 5; attempt++) {
    const before = counter.stats.dumps;
    await Promise.all([profiler.profile(), profiler.profile(), profiler.profile({ format: 'text' })]);
    results.sharedDumps = counter.stats.dumps - before;
    for (let i = 0; i < 2; i++) await profiler.profile();
    results.sequentialDumps = counter.stats.dumps - before - results.sharedDumps;
    results.dumpWindowAttempts = attempt;
    if (results.sharedDumps === 1 && results.sequentialDumps === 2) break;
  }
}
await call('writeProfile', () => profiler.writeProfile(join(dir, 'api.pb.gz')));
if (preloaded) results.writeMode = (statSync(join(dir, 'api.pb.gz')).mode & 0o777).toString(8);
await call('reset', () => profiler.reset());
if (preloaded) results.accumAfterReset = profiler.stats().estimatedAccumBytes;
await call('badStart', () => profiler.start({ interval: -1 }));
await call('badProfile', () => profiler.profile({ format: 'xml' }));
await call('sigusr1', () => startDumps({ dir, signal: 'SIGUSR1' }));

// dumps: rotation keeps 2, a signal dumps, the environment configures
const dumpDir = join(dir, 'dumps');
const dumps = await call('startDumps', () => startDumps({ dir: dumpDir, keep: 2, signal: 'SIGUSR2' }));
if (dumps) {
  const paths = [];
  for (let i = 0; i < 4; i++) paths.push(await dumps.dumpNow());
  results.rotation = { written: new Set(paths).size, kept: readdirSync(dumpDir).sort(), newest: paths.slice(2).map((p) => p.slice(dumpDir.length + 1)).sort() };
  const before = readdirSync(dumpDir).sort().join();
  process.kill(process.pid, 'SIGUSR2');
  const end = Date.now() + 15000;
  while (readdirSync(dumpDir).sort().join() === before && Date.now() < end) await sleep(50);
  results.signalDumped = readdirSync(dumpDir).sort().join() !== before;
  // the new file lands before the oldest is pruned: give the rotation its moment
  while (readdirSync(dumpDir).length > 2 && Date.now() < end) await sleep(50);
  results.afterSignal = readdirSync(dumpDir).length;
  dumps.stop();
}
// auto.js (--import) started dumps from MIMALLOC_PPROF_DUMP_*: wait for its periodic files
const envDir = process.env.MIMALLOC_PPROF_DUMP_DIR;
if (preloaded && envDir) {
  // the directory appears with the first periodic dump (auto.js makes it then)
  const list = () => (existsSync(envDir) ? readdirSync(envDir) : []);
  const end = Date.now() + 15000;
  while (list().length < 1 && Date.now() < end) await sleep(100);
  await sleep(1500);
  results.envDumps = list().filter((f) => /^heap\.\d+\.\d{8}T\d{6}\.\d{3}Z(-\d+)?\.pb\.gz$/.test(f)).length;
}
await call('badEnv', () => configureFromEnv({ MIMALLOC_PPROF_DUMP_DIR: dir, MIMALLOC_PPROF_DUMP_KEEP: 'many' }));
const pusher = await call('pushTo', () => pushTo({ url: 'http://127.0.0.1:9', appName: 'api-test', intervalSeconds: 60, logger: () => undefined }));
pusher?.stop();

// the HTTP handler answers in both cases
const handler = pprofHandler();
const server = http.createServer((req, res) => handler(req, res));
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const res = await fetch(`http://127.0.0.1:${server.address().port}/debug/pprof/heap`);
results.http = { status: res.status, goPprof: res.headers.get('x-go-pprof'), body: res.status === 200 ? '' : await res.text() };
if (res.status === 200) await res.arrayBuffer();
server.close();

await call('stop', () => profiler.stop());
await call('isRunningAfterStop', () => profiler.isRunning());
await call('startSeeded', () => profiler.start({ interval: 65536, seed: 1n, accum: true, btMax: 16 }));
if (preloaded) results.intervalAfterRestart = profiler.stats().sampleInterval;

await sleep(100);
results.alive = true;
rmSync(dir, { recursive: true, force: true });
for (const v of Object.values(results)) {
  if (!v || typeof v !== 'object' || !('value' in v)) continue;
  if (v.value instanceof Uint8Array) v.value = 'bytes';
  else if (v.value && typeof v.value === 'object' && Object.values(v.value).some((x) => typeof x === 'function')) {
    v.value = 'stats' in v.value ? { stats: v.value.stats } : 'handle'; // a pusher: its stats
  }
}
process.stdout.write(`${JSON.stringify(results)}\n`);
