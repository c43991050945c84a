/**
 * pushTo() against local HTTP servers that stand in for Grafana Pyroscope's /ingest: the
 * documented request shape (multipart fields, gzip, query parameters, auth header), retry
 * with backoff on 5xx (positive control: the same window arrives after two 503s), a dead
 * server given up on with one log line, and the application's event loop never blocked
 * (positive control: a deliberate block is seen by the same lag monitor).
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';

import { indexProfile, parseProfile, sampleTypeNames, str, type Profile } from '../../src/profile/index.js';
import { frameNames } from '../../src/profile/model.js';
import { seriesName } from '../../src/push/index.js';
import { startService, waitFor, type Service } from '../http/service.js';

interface Field {
  filename: string;
  contentType: string;
  data: Buffer;
}

interface Ingested {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  fields: Map<string, Field>;
  status: number;
}

/** A strict multipart/form-data reader (what Go's mime/multipart accepts). */
function parseMultipart(body: Buffer, boundary: string): Map<string, Field> {
  const fields = new Map<string, Field>();
  const delimiter = Buffer.from(`--${boundary}`);
  let pos = body.indexOf(delimiter);
  assert.equal(pos, 0, 'the body starts with the boundary');
  for (;;) {
    const start: number = pos + delimiter.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    assert.equal(body.subarray(start, start + 2).toString(), '\r\n');
    const headerEnd = body.indexOf('\r\n\r\n', start);
    assert.ok(headerEnd > 0, 'part headers end');
    const headers = body.subarray(start + 2, headerEnd).toString().split('\r\n');
    const next: number = body.indexOf(delimiter, headerEnd);
    assert.ok(next > 0, 'a closing boundary');
    assert.equal(body.subarray(next - 2, next).toString(), '\r\n');
    const disposition = headers.find((h) => /^content-disposition:/i.test(h)) ?? '';
    const name = /name="([^"]*)"/.exec(disposition)?.[1];
    const filename = /filename="([^"]*)"/.exec(disposition)?.[1] ?? '';
    const contentType = headers.find((h) => /^content-type:/i.test(h))?.split(':')[1]?.trim() ?? '';
    assert.ok(name, `a named part: ${disposition}`);
    fields.set(name, { filename, contentType, data: body.subarray(headerEnd + 4, next - 2) });
    pos = next;
  }
  return fields;
}

const requests: Ingested[] = [];
let ingest: Server;
let ingestPort = 0;
let deadPort = 0;
let svc: Service;

before(async () => {
  // the stand-in: two 503s, then 200s
  ingest = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const boundary = /boundary=(\S+)/.exec(req.headers['content-type'] ?? '')?.[1] ?? '';
      const status = requests.length < 2 ? 503 : 200;
      requests.push({
        method: req.method ?? '',
        path: url.pathname,
        query: url.searchParams,
        headers: req.headers,
        fields: boundary ? parseMultipart(Buffer.concat(chunks), boundary) : new Map(),
        status,
      });
      res.writeHead(status, { 'Content-Type': 'text/plain' });
      res.end(status === 200 ? '' : 'ingester overloaded');
    });
  });
  await new Promise<void>((r) => ingest.listen(0, '127.0.0.1', r));
  ingestPort = (ingest.address() as AddressInfo).port;
  // a port with nobody listening: bind, note, close
  const dead = createServer();
  await new Promise<void>((r) => dead.listen(0, '127.0.0.1', r));
  deadPort = (dead.address() as AddressInfo).port;
  await new Promise<void>((r) => dead.close(() => r()));

  svc = await startService({
    SERVICE_PUSH: JSON.stringify([
      {
        tag: 'flaky',
        url: `http://127.0.0.1:${ingestPort}`,
        appName: 'test-service',
        labels: { region: 'local', env: 'test' },
        intervalSeconds: 1,
        authToken: 'push-token',
        retry: { attempts: 4, initialDelayMs: 100, maxDelayMs: 400 },
      },
      {
        tag: 'dead',
        url: `http://127.0.0.1:${deadPort}/ingest`,
        appName: 'dead-service',
        intervalSeconds: 1,
        retry: { attempts: 2, initialDelayMs: 50, maxDelayMs: 100 },
      },
    ]),
  });
});

after(async () => {
  await svc?.stop();
  await new Promise<void>((r) => (ingest ? ingest.close(() => r()) : r()));
});

/** Sum of a sample type over the samples whose stack has `fn`. */
function valueUnder(p: Profile, type: string, fn: string): number {
  const i = sampleTypeNames(p).findIndex((t) => t.startsWith(`${type}/`));
  const ix = indexProfile(p);
  let sum = 0;
  for (const s of p.sample) {
    if (s.locationId.some((id) => frameNames(ix, ix.locations.get(Number(id))!).includes(fn))) sum += Number(s.value[i]);
  }
  return sum;
}

test('pushes reach the ingest server in the documented shape, retried through 5xx, without blocking the event loop', async () => {
  const accepted = () => requests.filter((r) => r.status === 200);
  // the application allocates in the first windows (its own work blocks its loop: not measured)
  for (let i = 0; i < 3; i++) {
    assert.equal((await svc.get('/job/push')).status, 200);
    await new Promise((r) => setTimeout(r, 300));
  }
  await waitFor(() => accepted().length >= 1, 20_000, 'a first accepted push');
  // from here on, measure the application's event-loop lag over three more windows, during
  // which the profiler dumps, symbolises, encodes and uploads
  await svc.json('/lag/reset');
  const seen = accepted().length;
  await waitFor(() => accepted().length >= seen + 3, 20_000, 'three more pushes');
  const lag = await svc.json<{ maxMs: number }>('/lag');
  assert.ok(lag.maxMs < 250, `event-loop lag reached ${lag.maxMs} ms while pushing`);
  process.stderr.write(`# event-loop lag while pushing: max ${lag.maxMs.toFixed(1)} ms\n`);
  // positive control: the same monitor sees a deliberate 1 s block
  await svc.json('/lag/reset');
  await svc.get('/job/block?ms=1000');
  await new Promise((r) => setTimeout(r, 100)); // the monitor's timer records the delay when it next fires
  const blocked = await svc.json<{ maxMs: number }>('/lag');
  assert.ok(blocked.maxMs >= 900, `a 1 s block showed as ${blocked.maxMs} ms`);

  // retries: two 503s, then the same window accepted
  assert.deepEqual(requests.slice(0, 3).map((r) => r.status), [503, 503, 200]);
  const window = (r: Ingested) => `${r.query.get('from')}-${r.query.get('until')}`;
  assert.equal(window(requests[1]!), window(requests[0]!));
  assert.equal(window(requests[2]!), window(requests[0]!));

  let pushAllocations = 0;
  for (const r of requests) {
    assert.equal(r.method, 'POST');
    assert.equal(r.path, '/ingest');
    assert.equal(r.query.get('name'), 'test-service{env=test,region=local}');
    assert.equal(r.query.get('spyName'), 'mimalloc-pprof');
    const from = Number(r.query.get('from'));
    const until = Number(r.query.get('until'));
    assert.ok(Number.isInteger(from) && Number.isInteger(until) && until > from && until - from <= 5, window(r));
    assert.ok(Math.abs(until - Date.now() / 1000) < 120, 'UNIX seconds');
    assert.equal(r.headers.authorization, 'Bearer push-token');
    assert.match(r.headers['content-type'] ?? '', /^multipart\/form-data; boundary=\S+$/);
    assert.deepEqual([...r.fields.keys()].sort(), ['profile', 'sample_type_config']);
    const profile = r.fields.get('profile')!;
    assert.equal(profile.filename, 'profile.pprof');
    assert.deepEqual([...profile.data.subarray(0, 2)], [0x1f, 0x8b], 'gzip magic');
    const p = parseProfile(profile.data);
    assert.deepEqual(sampleTypeNames(p), ['alloc_objects/count', 'alloc_space/bytes', 'inuse_objects/count', 'inuse_space/bytes']);
    assert.equal(str(p, p.defaultSampleType), 'inuse_space');
    assert.ok(p.sample.every((s) => s.label.length === 0), 'no per-thread labels (they would split series)');
    assert.ok(p.sample.every((s) => s.value.every((v) => Number(v) >= 0)));
    pushAllocations += valueUnder(p, 'alloc_space', 'pushAllocations');
    const config = JSON.parse(r.fields.get('sample_type_config')!.data.toString()) as Record<string, { units: string; aggregation: string; cumulative: boolean }>;
    assert.equal(r.fields.get('sample_type_config')!.filename, 'sample_type_config.json');
    assert.deepEqual(Object.keys(config).sort(), ['alloc_objects', 'alloc_space', 'inuse_objects', 'inuse_space']);
    assert.equal(config.inuse_space!.aggregation, 'average');
    assert.equal(config.alloc_space!.units, 'bytes');
    assert.ok(Object.values(config).every((c) => c.cumulative === false));
  }
  assert.ok(pushAllocations > 0, 'the JavaScript function that allocated is named in the pushed profiles');

  const stats = await svc.json<{ tag: string; pushed: number; failedAttempts: number; dropped: number }[]>('/push');
  const flaky = stats.find((s) => s.tag === 'flaky')!;
  assert.equal(flaky.failedAttempts, 2);
  assert.ok(flaky.pushed >= 4);
  assert.equal(flaky.dropped, 0);
  const flakyLines = svc.stderr().split('\n').filter((l) => l.startsWith('[flaky]'));
  assert.equal(flakyLines.length, 1, svc.stderr());
  assert.match(flakyLines[0]!, /push to http:\/\/127\.0\.0\.1:\d+\/ingest failed: HTTP 503 ingester overloaded; retrying/);
});

test('a dead server is retried, given up on, and logged once', async () => {
  await waitFor(async () => {
    const dead = (await svc.json<{ tag: string; dropped: number }[]>('/push')).find((s) => s.tag === 'dead')!;
    return dead.dropped >= 2;
  }, 20_000, 'two windows given up');
  const dead = (await svc.json<{ tag: string; pushed: number; failedAttempts: number; dropped: number }[]>('/push')).find((s) => s.tag === 'dead')!;
  assert.equal(dead.pushed, 0);
  assert.ok(dead.failedAttempts >= 2 * dead.dropped, 'each profile was tried twice before it was dropped');
  const lines = svc.stderr().split('\n').filter((l) => l.startsWith('[dead]'));
  assert.equal(lines.length, 1, svc.stderr());
  assert.match(lines[0]!, /ECONNREFUSED/);
  assert.equal(svc.child.exitCode, null, 'the service keeps running');
  // this service runs without --expose-gc: gc=1 is ignored and said so
  const r = await svc.get('/debug/pprof/heap?gc=1');
  assert.equal(r.status, 200);
  assert.match(String(r.headers['x-mimalloc-pprof-gc']), /^unavailable/);
});

test('series names carry sorted labels and refuse what Pyroscope would misparse', () => {
  assert.equal(seriesName('app', { b: '2', a: '1' }), 'app{a=1,b=2}');
  assert.equal(seriesName('app'), 'app');
  assert.throws(() => seriesName('app', { 'bad-name': 'x' }), TypeError);
  assert.throws(() => seriesName('app', { a: 'x,y' }), TypeError);
  assert.throws(() => seriesName('my app'), TypeError);
});
