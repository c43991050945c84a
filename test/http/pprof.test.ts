/**
 * /debug/pprof against a live service under the preload, read by the real client
 * (`go tool pprof`): JavaScript functions named, /allocs, `?seconds=N` windows, Go's headers
 * and errors, the Express, Fastify and serve() integrations, and load (1 000 requests at
 * concurrency 50) with coalesced dumps and bounded RSS.
 */
import assert from 'node:assert/strict';
import { Agent } from 'node:http';
import { after, before, test } from 'node:test';

import { parseProfile, sampleTypeNames, str } from '../../src/profile/index.js';
import { assertFewUnnamed } from '../node-names.js';
import { goPprof, httpGet, startService, topNames, waitFor, type Service } from './service.js';

let svc: Service;
let base: string;
const stats = () => svc.json<{ dumps: number; served: number; busy: number; rss: number; running: boolean }>('/stats');

before(async () => {
  svc = await startService({ SERVICE_FRAMEWORKS: '1' }, { nodeOptions: ['--expose-gc'] });
  base = `http://127.0.0.1:${svc.ports.http}`;
  assert.equal((await svc.get('/job/early')).status, 200);
});

after(async () => {
  await svc?.stop();
});

test('go tool pprof -top on /debug/pprof/heap shows the JavaScript function holding native memory', async () => {
  const r = await goPprof(['-top', `${base}/debug/pprof/heap`]);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /Type: inuse_space/);
  const names = topNames(r.out);
  assert.ok(names.includes('earlyAllocations'), r.out);
  assert.ok(names.some((n) => n.startsWith('node::NodeArrayBufferAllocator::')), 'native frames are named too');
  // the function that did not allocate yet is absent (the listing is not just every name)
  assert.ok(!names.includes('windowAllocations'), r.out);
});

test('?seconds=2 on /debug/pprof/allocs holds only the window\'s allocations; without it, all of them', async () => {
  const before = (await stats()).dumps;
  const windowed = goPprof(['-top', `${base}/debug/pprof/allocs?seconds=2`]);
  await waitFor(async () => (await stats()).dumps > before, 15_000, 'the window\'s first dump');
  await new Promise((r) => setTimeout(r, 300)); // the dump itself starts as soon as it is asked for
  assert.equal((await svc.get('/job/window')).status, 200);
  const w = await windowed;
  assert.equal(w.code, 0, w.out);
  assert.match(w.out, /Type: alloc_space/);
  const duration = Number(/Duration: ([\d.]+)s/.exec(w.out)?.[1]);
  assert.ok(duration >= 2 && duration < 6, `window of ${duration} s`);
  const inWindow = topNames(w.out);
  assert.ok(inWindow.includes('windowAllocations'), w.out);
  assert.ok(!inWindow.includes('earlyAllocations'), 'allocations before the window are subtracted');

  // positive control: the whole history (/allocs without seconds) has both
  const all = await goPprof(['-top', `${base}/debug/pprof/allocs`]);
  assert.equal(all.code, 0, all.out);
  assert.match(all.out, /Type: alloc_space/); // /allocs: default sample type alloc_space
  const names = topNames(all.out);
  assert.ok(names.includes('earlyAllocations') && names.includes('windowAllocations'), all.out);
});

test('Go\'s content types, headers and errors; debug=1 text; gc=1', async () => {
  const heap = await svc.get('/debug/pprof/heap');
  assert.equal(heap.status, 200);
  assert.equal(heap.headers['content-type'], 'application/octet-stream');
  assert.equal(heap.headers['content-disposition'], 'attachment; filename="heap"');
  assert.equal(heap.headers['x-content-type-options'], 'nosniff');
  assert.deepEqual([...heap.body.subarray(0, 2)], [0x1f, 0x8b]);
  const p = parseProfile(heap.body);
  assertFewUnnamed(p, '/debug/pprof/heap');
  assert.deepEqual(sampleTypeNames(p), ['alloc_objects/count', 'alloc_space/bytes', 'inuse_objects/count', 'inuse_space/bytes']);
  assert.equal(str(p, p.defaultSampleType), 'inuse_space');
  const allocs = await svc.get('/debug/pprof/allocs');
  assert.equal(allocs.headers['content-disposition'], 'attachment; filename="allocs"');
  const ap = parseProfile(allocs.body);
  assert.equal(str(ap, ap.defaultSampleType), 'alloc_space');
  const delta = await svc.get('/debug/pprof/heap?seconds=1');
  assert.equal(delta.status, 200);
  assert.equal(delta.headers['content-disposition'], 'attachment; filename="heap-delta"');

  const text = await svc.get('/debug/pprof/heap?debug=1');
  assert.equal(text.status, 200);
  assert.equal(text.headers['content-type'], 'text/plain; charset=utf-8');
  const body = text.body.toString();
  assert.match(body, /^heap profile: \d+: \d+ \[\d+: \d+\] @ heap_v2\/524288\n/);
  assert.match(body, /\n#\t0x[0-9a-f]+\tearlyAllocations\t\S*service\.mjs:\d+\n/);

  for (const [path, status, message] of [
    ['/debug/pprof/heap?seconds=abc', 400, /invalid value for "seconds"/],
    ['/debug/pprof/heap?seconds=1&debug=1', 400, /seconds and debug params are incompatible/],
    ['/debug/pprof/heap?seconds=100000', 400, /exceeds/],
    ['/debug/pprof/goroutine', 404, /Unknown profile/],
  ] as const) {
    const r = await svc.get(path);
    assert.equal(r.status, status, path);
    assert.equal(r.headers['x-go-pprof'], '1', path);
    assert.equal(r.headers['content-type'], 'text/plain; charset=utf-8');
    assert.match(r.body.toString(), message);
  }
  const index = await svc.get('/debug/pprof/');
  assert.equal(index.status, 200);
  assert.match(index.body.toString(), /href='\/debug\/pprof\/allocs\?debug=1'/);
  assert.equal((await svc.get('/debug/pprof/cmdline')).status, 403); // no token: test/http/hardening.test.ts
  assert.match((await svc.get('/debug/pprof/symbol')).body.toString(), /^num_symbols: 1\n$/);
  // the application's own routes still work behind the handler
  assert.equal((await svc.get('/stats')).status, 200);

  // gc=1 runs V8's gc here (--expose-gc); the push service shows the other outcome
  const gc = await svc.get('/debug/pprof/heap?gc=1');
  assert.equal(gc.status, 200);
  assert.equal(gc.headers['x-mimalloc-pprof-gc'], 'ran');
  assert.equal((await svc.get('/debug/pprof/heap')).headers['x-mimalloc-pprof-gc'], undefined);
});

test('the Express, Fastify and serve() integrations serve the same profiles', async () => {
  const { express, fastify, serve, serveHost } = svc.ports;
  assert.ok(express && fastify && serve);
  const r = await goPprof(['-top', `http://127.0.0.1:${express}/debug/pprof/heap`]);
  assert.equal(r.code, 0, r.out);
  assert.ok(topNames(r.out).includes('earlyAllocations'), r.out);
  assert.equal((await httpGet(express, '/hello')).body.toString(), 'hello from express');
  assert.equal((await httpGet(express, '/debug/pprof/goroutine')).status, 404);

  const f = await httpGet(fastify, '/debug/pprof/allocs');
  assert.equal(f.status, 200);
  assert.equal(f.headers['content-disposition'], 'attachment; filename="allocs"');
  assert.ok(parseProfile(f.body).sample.length > 0);
  assert.match((await httpGet(fastify, '/debug/pprof/')).body.toString(), /Types of profiles available/);
  assert.equal((await httpGet(fastify, '/hello')).body.toString(), 'hello from fastify');

  // serve(): loopback by default, and the token is enforced (control: the right one passes)
  assert.equal(serveHost, '127.0.0.1');
  const none = await httpGet(serve, '/debug/pprof/heap');
  assert.equal(none.status, 401);
  assert.equal(none.headers['www-authenticate'], 'Bearer realm="pprof"');
  assert.equal((await httpGet(serve, '/debug/pprof/heap', { headers: { Authorization: 'Bearer wrong' } })).status, 401);
  const ok = await httpGet(serve, '/debug/pprof/heap', { headers: { Authorization: 'Bearer test-token' } });
  assert.equal(ok.status, 200);
  assert.ok(parseProfile(ok.body).sample.length > 0);
});

test('1 000 requests at concurrency 50: no crash, dumps coalesced, RSS bounded', async () => {
  // control: requests one after another take one dump each (the counter counts dumps)
  const d0 = (await stats()).dumps;
  for (let i = 0; i < 3; i++) assert.equal((await svc.get('/debug/pprof/heap')).status, 200);
  assert.equal((await stats()).dumps - d0, 3);

  const rss0 = (await stats()).rss;
  const d1 = (await stats()).dumps;
  const agent = new Agent({ keepAlive: false, maxSockets: 50 });
  const statuses = new Map<number, number>();
  let issued = 0;
  let gzipped = 0;
  const paths = ['/debug/pprof/heap', '/debug/pprof/allocs'];
  const started = Date.now();
  await Promise.all(
    Array.from({ length: 50 }, async () => {
      while (issued < 1000) {
        const path = paths[issued++ % paths.length]!;
        const r = await httpGet(svc.ports.http, path, { agent, timeoutMs: 60_000 });
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.body[0] === 0x1f && r.body[1] === 0x8b) gzipped++;
      }
    }),
  );
  agent.destroy();
  const elapsed = Date.now() - started;
  assert.deepEqual([...statuses], [[200, 1000]]);
  assert.equal(gzipped, 1000);
  const s = await stats();
  const dumps = s.dumps - d1;
  assert.ok(dumps >= 1 && dumps <= 100, `${dumps} dumps for 1000 requests`);
  const growth = s.rss - rss0;
  assert.ok(growth < 160 << 20, `RSS grew by ${(growth / 2 ** 20).toFixed(0)} MiB`);
  assert.equal(svc.child.exitCode, null, 'the service is still running');
  process.stderr.write(`# 1000 requests in ${elapsed} ms, ${dumps} dumps, RSS ${(rss0 / 2 ** 20).toFixed(0)} -> ${(s.rss / 2 ** 20).toFixed(0)} MiB\n`);

  // control: the RSS gate sees growth when there is some (more than the allocator could
  // serve from pages it already holds)
  await svc.get('/job/retain?mb=384');
  const grown = (await stats()).rss - s.rss;
  assert.ok(grown >= 160 << 20, `retaining 384 MiB grew RSS by ${(grown / 2 ** 20).toFixed(0)} MiB`);
});
