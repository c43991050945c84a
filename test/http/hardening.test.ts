/**
 * Service mode as a security reviewer and a real client see it: profiles read from a
 * token-protected URL by the CLI; remote clients refused by default (in-process with a faked
 * peer, and for real from this host's own non-loopback address when it has one); half-open
 * connections that cannot lock serve() out; delta profiles that keep their labels; the
 * profiler's own worker thread left out (with its control); pushTo without the preload.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { parseProfile, str, type Profile } from '../../src/profile/index.js';
import { pprofHandler, serve } from '../../src/http/index.js';
import { cli } from '../cli/util.js';
import { root } from '../helpers.js';
import { httpGet, startService, type Service } from './service.js';

let svc: Service;

before(async () => {
  svc = await startService({ SERVICE_FRAMEWORKS: '1' });
  assert.equal((await svc.get('/job/early')).status, 200);
});

after(async () => {
  await svc?.stop();
});

/** Sampled in-use bytes by the value of the `thread` label. */
function bytesByThread(p: Profile): Map<string, number> {
  const i = p.sampleType.findIndex((t) => str(p, t.type) === 'inuse_space');
  const out = new Map<string, number>();
  for (const s of p.sample) {
    const t = s.label.find((l) => str(p, l.key) === 'thread');
    const k = t ? str(p, t.str) : '';
    out.set(k, (out.get(k) ?? 0) + Number(s.value[i]));
  }
  return out;
}

/** Captures process.stderr.write while `fn` runs. */
async function capturingStderr<T>(fn: () => Promise<T>): Promise<{ value: T; stderr: string }> {
  const write = process.stderr.write.bind(process.stderr);
  let stderr = '';
  process.stderr.write = ((chunk: string | Uint8Array) => {
    stderr += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
    return true;
  }) as typeof process.stderr.write;
  try {
    return { value: await fn(), stderr };
  } finally {
    process.stderr.write = write;
  }
}

test('top reads a token-protected /debug/pprof/heap URL with --token or MIMALLOC_PPROF_TOKEN and names the leaking function', async () => {
  const url = `http://127.0.0.1:${svc.ports.serve}/debug/pprof/heap`;
  const r = await cli(['top', url, '--token', 'test-token', '-n', '1000']);
  assert.equal(r.status, 0, r.stderr);
  const early = r.stdout.split('\n').find((l) => l.endsWith(' earlyAllocations'));
  assert.ok(early, r.stdout);
  // the 16 MiB it keeps, as its cumulative figure: 4 standard errors of the estimate
  // (sqrt(16 MiB × 512 KiB) ≈ 2.8 MiB) either side
  const cum = /^\s*\S+\s+\S+%\s+([\d.]+)MiB\s/.exec(early!)?.[1];
  assert.ok(cum !== undefined && Math.abs(Number(cum) - 16) < 4 * 2.83, early);

  const none = await cli(['top', url]);
  assert.equal(none.status, 2);
  assert.equal(none.stderr.trim().split('\n').length, 1);
  assert.match(none.stderr, /HTTP 401: the server wants a token \(--token T, or MIMALLOC_PPROF_TOKEN\)/);
  const wrong = await cli(['top', url, '--token', 'nope']);
  assert.equal(wrong.status, 2);
  assert.match(wrong.stderr, /HTTP 401: the server refused the token/);

  process.env.MIMALLOC_PPROF_TOKEN = 'test-token';
  try {
    const env = await cli(['diff', url, url]);
    assert.equal(env.status, 0, env.stderr);
    const dir = join(root, 'build', 'test');
    mkdirSync(dir, { recursive: true });
    const out = join(dir, `converted-${process.pid}.pb.gz`);
    const conv = await cli(['convert', url, out]);
    assert.equal(conv.status, 0, conv.stderr);
    assert.ok(parseProfile(readFileSync(out)).sample.length > 0);
    rmSync(out, { force: true });
  } finally {
    delete process.env.MIMALLOC_PPROF_TOKEN;
  }

  const refused = await cli(['top', 'http://127.0.0.1:1/debug/pprof/heap']);
  assert.equal(refused.status, 2);
  assert.match(refused.stderr, /^mimalloc-pprof: cannot read http:\/\/127\.0\.0\.1:1\/debug\/pprof\/heap: ECONNREFUSED/);
});

test('?seconds=N delta profiles keep the thread labels', async () => {
  const r = await svc.get('/debug/pprof/heap?seconds=1');
  assert.equal(r.status, 200, r.body.toString());
  const p = parseProfile(r.body);
  assert.ok(p.sample.length > 0);
  const labelled = p.sample.filter((s) => s.label.some((l) => str(p, l.key) === 'thread'));
  assert.ok(labelled.length > 0, 'no sample of the delta has a thread label');
  // the full profile labels the same way (what the delta must keep)
  const full = parseProfile((await svc.get('/debug/pprof/heap')).body);
  assert.ok(full.sample.every((s) => s.label.some((l) => str(full, l.key) === 'thread')));
});

test('the profiler\'s own worker thread is left out of profiles by default; includeProfilerThreads shows it', async (t) => {
  // The worker reads ELF symbol tables and encodes profiles: about 20 MiB in use. At the
  // default 512 KiB interval that many bytes are seen with a standard error of about
  // sqrt(20 MiB × 512 KiB) ≈ 3.2 MiB, so shown it is far above 8 MiB. Left out, what remains is
  // what the worker's start-up kept before its first line could exclude it (0-2.8 MiB on Node 20
  // and 22, 4.2 MiB once under load): under half of what shown holds, which an exclusion that
  // does not work (the same ~20 MiB, give or take 2 standard errors) does not get under.
  const churn = async (s: Service) => {
    for (let i = 0; i < 3; i++) {
      assert.equal((await s.get('/debug/pprof/heap?debug=1')).status, 200);
      assert.equal((await s.get('/debug/pprof/allocs')).status, 200);
    }
    return bytesByThread(parseProfile((await s.get('/debug/pprof/heap')).body));
  };
  const hidden = (await churn(svc)).get('worker_threads') ?? 0;
  const control = await startService({ SERVICE_SHOW_SELF: '1' });
  let shown = 0;
  try {
    shown = (await churn(control)).get('worker_threads') ?? 0;
    assert.ok(shown > 8 * 1048576, `shown: ${shown} bytes on the worker thread`);
  } finally {
    await control.stop();
  }
  t.diagnostic(`the profiler's worker: ${hidden} bytes left out, ${shown} shown`);
  assert.ok(hidden < shown / 2, `left out, yet ${hidden} bytes on the worker thread (${shown} when shown)`);
});

/** A fake request from `peer` (the handler reads only these fields before deciding). */
function fakeRequest(peer: string | undefined, headers: Record<string, string> = {}, path = '/debug/pprof/') {
  return { url: path, method: 'GET', headers, socket: { remoteAddress: peer } } as never;
}

function fakeResponse() {
  const r = { status: 0, body: '', headersSent: false, writableEnded: false, destroyed: false };
  return Object.assign(r, {
    writeHead(status: number) {
      r.status = status;
      r.headersSent = true;
      return this;
    },
    end(body?: string) {
      r.body += body ?? '';
      r.writableEnded = true;
    },
  });
}

test('pprofHandler answers only loopback clients by default: 403 with one warning; a token or allowRemote lets others in', async () => {
  const handler = pprofHandler({ autoStart: false });
  const { stderr } = await capturingStderr(async () => {
    for (const peer of ['203.0.113.9', '::ffff:10.1.2.3', '2001:db8::1']) {
      const res = fakeResponse();
      handler(fakeRequest(peer), res as never);
      assert.equal(res.status, 403, peer);
      assert.match(res.body, /loopback clients only/);
    }
    // through a proxy on this host: remote too
    const proxied = fakeResponse();
    handler(fakeRequest('127.0.0.1', { 'x-forwarded-for': '198.51.100.4' }), proxied as never);
    assert.equal(proxied.status, 403);
    // loopback, IPv4-mapped loopback, IPv6 loopback and a Unix socket are answered
    for (const peer of ['127.0.0.1', '127.8.9.10', '::ffff:127.0.0.1', '::1', undefined]) {
      const res = fakeResponse();
      handler(fakeRequest(peer), res as never);
      assert.equal(res.status, 200, String(peer));
    }
  });
  assert.equal(stderr.split('\n').filter((l) => l !== '').length, 1, stderr);
  assert.match(stderr, /refused \/debug\/pprof\/ to 203\.0\.113\.9: heap profiles are served to loopback clients only/);
  assert.equal(handler.stats.refused, 4);

  const withToken = pprofHandler({ autoStart: false, authToken: 's3cret' });
  const noToken = fakeResponse();
  withToken(fakeRequest('203.0.113.9'), noToken as never);
  assert.equal(noToken.status, 401);
  const ok = fakeResponse();
  withToken(fakeRequest('203.0.113.9', { authorization: 'Bearer s3cret' }), ok as never);
  assert.equal(ok.status, 200);
  const open = fakeResponse();
  pprofHandler({ autoStart: false, allowRemote: true })(fakeRequest('203.0.113.9'), open as never);
  assert.equal(open.status, 200);
  assert.throws(() => pprofHandler({ allowRemote: 'yes' as never }), /allowRemote must be a boolean/);
});

test('a client on this host\'s own non-loopback address is refused by a default handler (real sockets)', async (t) => {
  const address = Object.values(networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
  if (!address) return t.skip('this host has no non-loopback IPv4 address (the in-process test covers the rule)');
  const { value } = await capturingStderr(async () => {
    const s = await serve({ port: 0, host: '0.0.0.0', autoStart: false });
    try {
      const viaLoopback = await httpGet(s.port, '/debug/pprof/');
      const viaOwnAddress = await new Promise<number>((resolve, reject) => {
        import('node:http')
          .then(({ get }) => {
            get({ host: address, port: s.port, path: '/debug/pprof/', agent: false }, (res) => {
              res.resume();
              resolve(res.statusCode ?? 0);
            }).on('error', reject);
          })
          .catch(reject);
      });
      return { viaLoopback: viaLoopback.status, viaOwnAddress };
    } finally {
      await s.close();
    }
  });
  assert.equal(value.viaLoopback, 200);
  assert.equal(value.viaOwnAddress, 403);
});

test('connections that never send a request lose their slots within seconds', async () => {
  const s = await serve({ port: 0, maxConnections: 4, autoStart: false });
  const idle: Socket[] = [];
  try {
    for (let i = 0; i < 4; i++) {
      idle.push(
        await new Promise<Socket>((resolve, reject) => {
          const c = connect(s.port, '127.0.0.1', () => resolve(c));
          c.on('error', () => undefined);
          c.once('error', reject);
        }),
      );
    }
    idle[0]!.write('GET /debug/pprof/ HTTP/1.1\r\nHost: x\r\n'); // a request that never ends
    const started = Date.now();
    const attempt = () => httpGet(s.port, '/debug/pprof/', { timeoutMs: 2_000 }).then((r) => r.status, () => 0);
    // the slots are full: a request is refused now (the lockout happens at all)
    assert.equal(await attempt(), 0);
    let status = 0;
    while (status !== 200 && Date.now() - started < 30_000) {
      await new Promise((r) => setTimeout(r, 250));
      status = await attempt();
    }
    const lockedMs = Date.now() - started;
    assert.equal(status, 200);
    // headers within 5 s, checked every second: answered again after about 6 s (was ~40 s)
    assert.ok(lockedMs < 12_000, `locked out for ${lockedMs} ms`);
  } finally {
    for (const c of idle) c.destroy();
    await s.close();
  }
});

test('pushTo without the preload: the application keeps running, one log line, stats say unavailable', () => {
  const index = join(root, 'dist', 'src', 'index.js');
  const script = `
    import { pushTo } from ${JSON.stringify(index)};
    const p = pushTo({ url: 'http://127.0.0.1:9/', appName: 'app', intervalSeconds: 1 });
    await p.flush(100);
    setTimeout(() => { p.stop(); console.log(JSON.stringify(p.stats)); }, 300);
  `;
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_')));
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env, timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  const stats = JSON.parse(r.stdout) as { available: boolean; reason: string; collected: number };
  assert.equal(stats.available, false);
  assert.match(stats.reason, /preload/);
  assert.equal(stats.collected, 0);
  const lines = r.stderr.split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0]!, /^mimalloc-pprof: push to http:\/\/127\.0\.0\.1:9 is off: /);
});

test('without a token /debug/pprof/cmdline is refused; with one it is served', async () => {
  const open = pprofHandler({ autoStart: false });
  const refused = fakeResponse();
  open(fakeRequest('127.0.0.1', {}, '/debug/pprof/cmdline'), refused as never);
  assert.equal(refused.status, 403);
  assert.match(refused.body, /command line is served only with a token/);
  // control: the same request with the token gets the arguments
  const withToken = pprofHandler({ autoStart: false, authToken: 's3cret' });
  const served = fakeResponse();
  withToken(fakeRequest('127.0.0.1', { authorization: 'Bearer s3cret' }, '/debug/pprof/cmdline'), served as never);
  assert.equal(served.status, 200);
  assert.equal(served.body, process.argv.join('\0'));
});

test('allowRemote without a token: the first remote request says so once; loopback requests say nothing', async () => {
  const { stderr: local } = await capturingStderr(async () => {
    const h = pprofHandler({ autoStart: false, allowRemote: true });
    for (let i = 0; i < 3; i++) h(fakeRequest('127.0.0.1'), fakeResponse() as never);
  });
  assert.equal(local, ''); // control: loopback peers are not reported
  const { stderr } = await capturingStderr(async () => {
    const h = pprofHandler({ autoStart: false, allowRemote: true });
    for (const peer of ['203.0.113.9', '198.51.100.4', '203.0.113.9']) {
      const res = fakeResponse();
      h(fakeRequest(peer), res as never);
      assert.equal(res.status, 200);
    }
  });
  const lines = stderr.split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 1, stderr);
  assert.match(lines[0]!, /serving \/debug\/pprof\/ to 203\.0\.113\.9 without a token/);
});

test('serve() without a token on a non-loopback address warns once per process; on loopback not at all', () => {
  const index = join(root, 'dist', 'src', 'index.js');
  const script = (host: string) => `
    import { serve } from ${JSON.stringify(index)};
    for (let i = 0; i < 3; i++) await (await serve({ port: 0, host: ${JSON.stringify(host)}, autoStart: false })).close();
  `;
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('MIMALLOC_')));
  const run = (host: string) => spawnSync(process.execPath, ['--input-type=module', '-e', script(host)], { encoding: 'utf8', env, timeout: 30_000 });
  const wide = run('0.0.0.0');
  assert.equal(wide.status, 0, wide.stderr);
  const lines = wide.stderr.split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 1, wide.stderr);
  assert.match(lines[0]!, /listening on 0\.0\.0\.0 without a token/);
  const local = run('127.0.0.1'); // control
  assert.equal(local.status, 0, local.stderr);
  assert.equal(local.stderr, '');
});
