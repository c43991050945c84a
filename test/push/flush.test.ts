/**
 * `await pusher.flush()` and `await pusher.stop()` in a process with nothing else on its event
 * loop, the backend down (a port nobody listens on; a server that accepts and never answers):
 * each resolves within its deadline with what was and was not sent, and the code after it
 * runs. Positive control: with the deadline's keep-alive unref'ed
 * (MIMALLOC_PPROF_TEST_FLUSH_UNREF=1) the process exits with the flush pending and the line
 * after `await` never runs.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { libraryPath } from '../../src/preload/library.js';
import { root } from '../helpers.js';

const index = join(root, 'dist', 'src', 'index.js');
let deadPort = 0;
let blackHole: Server;
let blackHolePort = 0;
const held: import('node:net').Socket[] = [];

before(async () => {
  const dead = createServer();
  await new Promise<void>((r) => dead.listen(0, '127.0.0.1', r));
  deadPort = (dead.address() as AddressInfo).port;
  await new Promise<void>((r) => dead.close(() => r()));
  blackHole = createServer((s) => {
    held.push(s); // accepted, read, never answered
    s.resume();
  });
  await new Promise<void>((r) => blackHole.listen(0, '127.0.0.1', r));
  blackHolePort = (blackHole.address() as AddressInfo).port;
});

after(async () => {
  for (const s of held) s.destroy();
  await new Promise<void>((r) => blackHole.close(() => r()));
});

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A process whose only work is pushTo, one `await`, and a line after it. Its retries back off
 * from 1 s (jittered to 0.5-1x): the five tries before a profile is given up take at least 7.5 s,
 * so no deadline here ends by the window being given up (at 200 ms, four jittered delays could
 * sum to 1.5 s, and a 2 s flush once resolved early, not timed out). */
function pushProcess(port: number, call: string, env: Record<string, string> = {}): Promise<Outcome> {
  const script = `
    import { pushTo } from ${JSON.stringify(index)};
    const p = pushTo({ url: 'http://127.0.0.1:${port}/', appName: 'app', intervalSeconds: 60, retry: { initialDelayMs: 1000 } });
    const t0 = Date.now();
    const r = await p.${call};
    console.log(JSON.stringify({ ms: Date.now() - t0, ...r }));
  `;
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MIMALLOC_') && k !== 'NODE_OPTIONS' && k !== 'LD_PRELOAD'));
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    env: { ...clean, LD_PRELOAD: libraryPath(), MIMALLOC_PROF: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('exit', (code) => {
      clearTimeout(kill);
      resolve({ code, stdout, stderr });
    });
  });
}

const result = (o: Outcome) => JSON.parse(o.stdout.trim().split('\n').pop() ?? '{}') as { ms: number; sent: number; failed: number; pending: number; timedOut: boolean };

test('flush({ deadlineMs: 2000 }) with nothing listening resolves by its deadline with the window pending; the line after it runs', async () => {
  const o = await pushProcess(deadPort, 'flush({ deadlineMs: 2000 })');
  assert.equal(o.code, 0, o.stderr);
  const r = result(o);
  assert.ok(r.ms >= 1900 && r.ms < 2000 + 1500, `${r.ms} ms`); // the deadline, plus start-up of a dump
  assert.equal(r.sent, 0);
  assert.equal(r.timedOut, true);
  assert.equal(r.pending + r.failed, 1, o.stdout); // the one window: still queued or given up
  assert.match(o.stderr, /ECONNREFUSED/);
});

test('flush() against a server that never answers resolves by the default deadline (5 s); the line after it runs', async () => {
  const o = await pushProcess(blackHolePort, 'flush()');
  assert.equal(o.code, 0, o.stderr);
  const r = result(o);
  assert.ok(r.ms >= 4900 && r.ms < 5000 + 1500, `${r.ms} ms`);
  assert.deepEqual([r.sent, r.pending, r.timedOut], [0, 1, true]);
});

test('stop({ deadlineMs: 1000 }) with nothing listening resolves by its deadline, the window dropped unsent', async () => {
  const o = await pushProcess(deadPort, 'stop({ deadlineMs: 1000 })');
  assert.equal(o.code, 0, o.stderr);
  const r = result(o);
  assert.ok(r.ms >= 900 && r.ms < 1000 + 1500, `${r.ms} ms`);
  assert.equal(r.sent, 0);
  assert.equal(r.pending + r.failed, 1, o.stdout);
});

test('positive control: without the keep-alive the process exits with the flush pending; the line after await never runs', async () => {
  const o = await pushProcess(deadPort, 'flush({ deadlineMs: 2000 })', { MIMALLOC_PPROF_TEST_FLUSH_UNREF: '1' });
  assert.equal(o.stdout, '', 'the line after await ran');
});
