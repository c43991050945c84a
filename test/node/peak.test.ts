/**
 * The peak from inside a Node process: profiler.profile({ peak: true }), stats().peak and
 * /debug/pprof/heap?peak=1. A function builds 64 MiB of Buffers (1 MiB each), which are then
 * dropped and collected: the peak profile holds it (within 4 standard errors of the
 * estimate, σ = 1 MiB · √(64 e^(−2) / (1 − e^(−2))) ≈ 3.1 MiB, plus the copy's step of 1/32),
 * the profile of now does not.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';

import { parseProfile, top, findSampleType } from '../../src/profile/index.js';
import { root, runPreloaded } from '../helpers.js';
import { mimallocLabel } from '../mimalloc.js';
import { assertFewUnnamed } from '../node-names.js';

const MiB = 1 << 20;

test(`profile({ peak: true }), stats().peak and ?peak=1 hold the freed high-water mark; the profile of now does not (${mimallocLabel})`, () => {
  const index = join(root, 'dist', 'src', 'index.js');
  const script = `
    import http from 'node:http';
    import { profiler, pprofHandler } from ${JSON.stringify(index)};
    profiler.start({ accum: true });
    let held = [];
    function buildPeakNode() { for (let i = 0; i < 64; i++) held.push(Buffer.alloc(1 << 20, 1)); }
    buildPeakNode();
    held = [];
    globalThis.gc(); globalThis.gc();
    await new Promise((r) => setTimeout(r, 50));
    const peak = await profiler.profile({ peak: true, gzip: false });
    const now = await profiler.profile({ gzip: false });
    const stats = profiler.stats().peak;
    const handler = pprofHandler({ autoStart: false, jsHeap: false });
    const server = http.createServer((req, res) => handler(req, res));
    await new Promise((r) => server.listen(0, '127.0.0.1', r));
    const res = await fetch('http://127.0.0.1:' + server.address().port + '/debug/pprof/heap?peak=1');
    const viaHttp = Buffer.from(await res.arrayBuffer());
    const bad = await fetch('http://127.0.0.1:' + server.address().port + '/debug/pprof/heap?peak=1&seconds=1');
    server.close();
    console.log(JSON.stringify({ peak: peak.toString('base64'), now: now.toString('base64'), http: viaHttp.toString('base64'), status: res.status, bad: bad.status, stats }));
  `;
  const r = runPreloaded(process.execPath, ['--expose-gc', '--perf-basic-prof', '--interpreted-frames-native-stack', '--input-type=module', '-e', script]);
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { peak: string; now: string; http: string; status: number; bad: number; stats: { bytes: number; unixMs: number; snapshots: number } };
  const cum = (b64: string) => {
    const p = parseProfile(Buffer.from(b64, 'base64'));
    assertFewUnnamed(p, 'profile({ peak }) / profile() / the endpoint');
    return top(p, findSampleType(p, 'inuse_space')).find((row) => row.name === 'buildPeakNode')?.cum ?? 0;
  };
  const sd = MiB * Math.sqrt((64 * Math.exp(-2)) / -Math.expm1(-2));
  const atPeak = cum(out.peak);
  assert.ok(Math.abs(atPeak - 64 * MiB) <= 4 * sd + (70 * MiB) / 32, `at the peak: ${atPeak}`);
  assert.ok(cum(out.now) < 4 * MiB, `now: ${cum(out.now)}`);
  assert.equal(out.status, 200);
  assert.ok(Math.abs(cum(out.http) - 64 * MiB) <= 4 * sd + (70 * MiB) / 32, `?peak=1: ${cum(out.http)}`);
  assert.equal(out.bad, 400);
  assert.ok(out.stats.bytes >= atPeak * 0.9 && out.stats.snapshots >= 1 && Math.abs(out.stats.unixMs - Date.now()) < 120_000, JSON.stringify(out.stats));
});
