/**
 * `/debug/pprof/*` as Go's net/http/pprof serves it, for the native heap of this process, so
 * `go tool pprof http://HOST:PORT/debug/pprof/heap`, Parca and Pyroscope's scraper just work.
 *
 *   /debug/pprof/            index (HTML)
 *   /debug/pprof/heap        in-use memory (default sample type inuse_space)
 *   /debug/pprof/allocs      the same profile, default sample type alloc_space
 *   /debug/pprof/cmdline     the process's arguments, NUL-separated (with authToken only: an
 *                            argument may be a password, and without a token every local
 *                            user can ask)
 *   /debug/pprof/symbol      pprof's remote symbolisation endpoint (profiles are already named)
 *
 * Query: `debug=N` (>0: heap_v2 text annotated with names), `gc=N` (heap: V8's gc first when
 * node runs with --expose-gc; otherwise ignored and said so in X-Mimalloc-Pprof-Gc),
 * `seconds=N` (delta profile of that window: NEXT − BASE), `peak=1` (the profile as it stood
 * at the high-water mark of the estimated in-use bytes). Headers and errors as Go's.
 *
 * Who is answered: loopback clients only, unless `authToken` is set (then whoever sends it)
 * or `allowRemote: true`; others get 403 and one warning per handler. A request that came
 * through a proxy (Forwarded, X-Forwarded-For or X-Real-IP) counts as remote, since a proxy
 * on this host makes every public client look local.
 *
 * The handler is a plain `(req, res, next?)` function: `http.createServer(handler)`,
 * `app.use(handler)` in Express, or Fastify with `reply.hijack()` (docs/node-api.md).
 * Every request is served from the shared snapshot service: concurrent requests share one
 * dump, and the work runs in a worker thread.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIPv4 } from 'node:net';

import { MimallocPprofError } from '../errors.js';
import { checkAvailability } from '../node/addon.js';
import type { RenderSpec } from '../node/engine.js';
import { startJsHeap } from '../node/js-heap.js';
import { checkStartOptions, profiler, type StartOptions } from '../node/profiler.js';
import { snapshots, type GcOutcome, type Lease } from '../node/snapshots.js';

export interface PprofHandlerOptions {
  /** Path prefix (default `/debug/pprof`). */
  prefix?: string;
  /** Require `Authorization: Bearer <token>` on every request; clients may then be remote. */
  authToken?: string;
  /** Answer clients that are not on loopback even without a token (default false: 403). */
  allowRemote?: boolean;
  /**
   * Start the profiler when it is not running (default true, with accum on, which /allocs
   * and `?seconds=N` need); an object gives the start options. false: leave it alone.
   */
  autoStart?: boolean | StartOptions;
  /** Longest `?seconds=N` window (default 300). */
  maxSeconds?: number;
  /** Requests waiting for a profile at once; more are answered 503 (default 256). */
  maxConcurrent?: number;
  /** `?seconds=N` windows open at once; more are answered 503 (default 16). */
  maxWindows?: number;
  /** Sample the JavaScript heap too, from now on (default true): heap profiles carry it as
   * heap=js samples (`?js=0` leaves them out of one response). */
  jsHeap?: boolean;
}

export type NextFunction = (err?: unknown) => void;

/** A request handler for node:http, Express (as middleware) and Fastify (hijacked). */
export interface PprofHandler {
  (req: IncomingMessage, res: ServerResponse, next?: NextFunction): void;
  /** Counters: requests answered with a profile, refused as busy, refused as remote, dumps taken in this process. */
  readonly stats: { served: number; busy: number; refused: number; readonly dumps: number };
}

const KEYS = new Set(['prefix', 'authToken', 'allowRemote', 'autoStart', 'maxSeconds', 'maxConcurrent', 'maxWindows', 'jsHeap']);

const PROFILES = {
  heap: 'A sampling of the native memory in use (mimalloc, via the preload library). You can specify the gc GET parameter to run V8\'s gc before taking the heap sample (needs node --expose-gc).',
  allocs: 'A sampling of all past native memory allocations (needs cumulative mode: MIMALLOC_PROF_ACCUM=1, or the profiler started by this handler).',
} as const;

const digest = (s: string) => createHash('sha256').update(s).digest();

function positiveInt(name: string, v: unknown, dflt: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw new TypeError(`pprofHandler: ${name} must be a positive integer`);
  return v;
}

/** Go's serveError: text/plain, X-Go-Pprof: 1 (so the pprof client prints the body). */
function serveError(res: ServerResponse, status: number, text: string, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.writableEnded || res.destroyed) return;
  res.writeHead(status, {
    'Content-Type': 'text/plain; charset=utf-8',
    'X-Go-Pprof': '1',
    'X-Content-Type-Options': 'nosniff',
    ...headers,
  });
  res.end(`${text}\n`);
}

/** A loopback peer: 127.0.0.0/8, ::1 or IPv4-mapped 127.x; no address is a Unix socket's. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (address === undefined) return true;
  if (address === '::1') return true;
  const v4 = address.toLowerCase().startsWith('::ffff:') ? address.slice(7) : address;
  return isIPv4(v4) && v4.startsWith('127.');
}

const PROXY_HEADERS = ['forwarded', 'x-forwarded-for', 'x-real-ip'];

/** Where a request came from, as far as this process can tell: its peer, or "via a proxy". */
function remoteOf(req: IncomingMessage): string | undefined {
  const peer = req.socket?.remoteAddress;
  if (!isLoopbackAddress(peer)) return peer;
  return PROXY_HEADERS.some((h) => req.headers[h] !== undefined) ? `${peer ?? 'a local socket'} (via a proxy)` : undefined;
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Creates the handler (see the file comment). Never throws for a missing preload: it answers 503. */
export function pprofHandler(options: PprofHandlerOptions = {}): PprofHandler {
  for (const k of Object.keys(options)) if (!KEYS.has(k)) throw new TypeError(`pprofHandler: unknown option '${k}'`);
  const prefix = (options.prefix ?? '/debug/pprof').replace(/\/+$/, '');
  if (!prefix.startsWith('/') && prefix !== '') throw new TypeError('pprofHandler: prefix must start with /');
  const maxSeconds = positiveInt('maxSeconds', options.maxSeconds, 300);
  const maxConcurrent = positiveInt('maxConcurrent', options.maxConcurrent, 256);
  const maxWindows = positiveInt('maxWindows', options.maxWindows, 16);
  if (options.authToken !== undefined && (typeof options.authToken !== 'string' || options.authToken === '')) {
    throw new TypeError('pprofHandler: authToken must be a non-empty string');
  }
  const token = options.authToken === undefined ? undefined : digest(options.authToken);
  if (options.allowRemote !== undefined && typeof options.allowRemote !== 'boolean') throw new TypeError('pprofHandler: allowRemote must be a boolean');
  const remoteAllowed = token !== undefined || options.allowRemote === true;
  let warnedRemote = false;
  let warnedRemoteServed = false; // a remote peer served without a token (allowRemote), said once
  const autoStart = options.autoStart ?? true;
  const startOptions: StartOptions = autoStart === true ? { accum: true } : autoStart === false ? {} : { accum: true, ...autoStart };
  if (autoStart !== false) checkStartOptions(startOptions);

  if (options.jsHeap !== undefined && typeof options.jsHeap !== 'boolean') throw new TypeError('pprofHandler: jsHeap must be a boolean');
  const jsHeap = options.jsHeap !== false;

  let started = false;
  const ensureStarted = () => {
    if (started || autoStart === false) return;
    started = true;
    if (!profiler.isRunning()) profiler.start(startOptions);
    if (jsHeap) startJsHeap(profiler.stats().sampleInterval || 524288);
  };
  if (checkAvailability().available) {
    try {
      ensureStarted();
    } catch {
      started = false; // retried on the first request; that one reports the error
    }
  }

  let active = 0;
  let windows = 0;
  const stats = {
    served: 0,
    busy: 0,
    refused: 0,
    get dumps() {
      return snapshots.dumps;
    },
  };

  const authorized = (req: IncomingMessage): boolean => {
    if (!token) return true;
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    return m !== null && timingSafeEqual(digest(m[1]!), token);
  };

  const index = (res: ServerResponse, base: string) => {
    const a = checkAvailability();
    const rows = Object.keys(PROFILES)
      .map((name) => `<tr><td><a href='${base}${name}?debug=1'>${name}</a></td><td><a href='${base}${name}'>binary</a></td></tr>`)
      .join('\n');
    const descriptions = Object.entries(PROFILES)
      .map(([name, d]) => `<li><div class=profile-name>${name}: </div> ${escapeHtml(d)}</li>`)
      .join('\n');
    const status = a.available ? 'profiler available' : `profiler not available: ${escapeHtml(a.reason ?? '')}`;
    const body = `<html>
<head><title>${escapeHtml(prefix)}/</title></head>
<body>
${escapeHtml(prefix)}/<br>
<br>
mimalloc-pprof: native heap profiles of this process (${status}).<br>
<br>
Types of profiles available:
<table>
<thead><td>Profile</td><td></td></thead>
${rows}
</table>
<br>
<p>
Profile Descriptions:
<ul>
${descriptions}
</ul>
</p>
</body>
</html>
`;
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
    res.end(body);
  };

  /** Resolves false when the client went away first. */
  const sleep = (ms: number, res: ServerResponse) =>
    new Promise<boolean>((resolve) => {
      const onClose = () => {
        clearTimeout(timer);
        resolve(false);
      };
      const timer = setTimeout(() => {
        res.removeListener('close', onClose);
        resolve(true);
      }, ms);
      res.once('close', onClose);
    });

  const gcHeader = (gc: GcOutcome): Record<string, string> =>
    gc === 'ran'
      ? { 'X-Mimalloc-Pprof-Gc': 'ran' }
      : gc === 'unavailable'
        ? { 'X-Mimalloc-Pprof-Gc': 'unavailable (start node with --expose-gc)' }
        : gc === 'joined'
          ? { 'X-Mimalloc-Pprof-Gc': 'skipped (joined a dump already under way)' }
          : {};

  const serveProfile = async (name: 'heap' | 'allocs', req: IncomingMessage, res: ServerResponse, q: URLSearchParams) => {
    const debug = Number.parseInt(q.get('debug') ?? '', 10) || 0; // Go: Atoi, errors read as 0
    const gc = name === 'heap' && (Number.parseInt(q.get('gc') ?? '', 10) || 0) > 0;
    const peak = (Number.parseInt(q.get('peak') ?? '', 10) || 0) > 0;
    const secondsText = q.get('seconds') ?? '';
    let seconds = 0;
    if (secondsText !== '') {
      seconds = /^\d+$/.test(secondsText) ? Number(secondsText) : 0;
      if (seconds <= 0) return serveError(res, 400, 'invalid value for "seconds" - must be a positive integer');
      if (seconds > maxSeconds) return serveError(res, 400, `profile duration exceeds this server's limit of ${maxSeconds} seconds`);
      if (debug !== 0) return serveError(res, 400, 'seconds and debug params are incompatible');
      if (peak) return serveError(res, 400, 'seconds and peak params are incompatible');
    }
    const a = checkAvailability();
    if (!a.available) return serveError(res, 503, `mimalloc-pprof: the profiler is not available in this process: ${a.reason}`);
    if (active >= maxConcurrent || (seconds > 0 && windows >= maxWindows)) {
      stats.busy++;
      return serveError(res, 503, 'mimalloc-pprof: too many profile requests at once; retry later', { 'Retry-After': '1' });
    }
    ensureStarted();

    const withJs = jsHeap && q.get('js') !== '0';
    const spec: RenderSpec = {
      ...(debug > 0 ? { format: 'text' as const } : { format: 'proto' as const, ...(name === 'allocs' ? { defaultSampleType: 'alloc_space' } : {}) }),
      ...(withJs ? {} : { jsHeap: false }),
    };
    active++;
    if (seconds > 0) windows++;
    const leases: Lease[] = [];
    try {
      const first = await snapshots.acquire({ gc, peak });
      leases.push(first);
      let data: Uint8Array;
      if (seconds > 0) {
        // the window runs from the first dump, not from when its symbolisation ended
        const elapsed = Date.now() - Number(first.timeNs / 1_000_000n);
        if (!(await sleep(Math.max(0, seconds * 1000 - elapsed), res))) return;
        const last = await snapshots.acquire();
        leases.push(last);
        data = await last.delta(first, spec);
      } else {
        data = await first.render(spec);
      }
      if (res.destroyed || res.writableEnded) return;
      const headers: Record<string, string | number> = { 'X-Content-Type-Options': 'nosniff', 'Content-Length': data.byteLength, ...gcHeader(first.gc) };
      if (spec.format === 'text') headers['Content-Type'] = 'text/plain; charset=utf-8';
      else {
        headers['Content-Type'] = 'application/octet-stream';
        headers['Content-Disposition'] = `attachment; filename="${name}${seconds > 0 ? '-delta' : ''}"`;
      }
      res.writeHead(200, headers);
      res.end(req.method === 'HEAD' ? undefined : data);
      stats.served++;
    } finally {
      for (const l of leases) l.release();
      active--;
      if (seconds > 0) windows--;
    }
  };

  const handler = (req: IncomingMessage, res: ServerResponse, next?: NextFunction): void => {
    const notOurs = () => {
      if (next) next();
      else serveError(res, 404, '404 page not found');
    };
    let url: URL;
    try {
      url = new URL((req as { originalUrl?: string }).originalUrl ?? req.url ?? '/', 'http://localhost');
    } catch {
      return notOurs();
    }
    const path = url.pathname;
    if (path !== prefix && !path.startsWith(`${prefix}/`)) return notOurs();
    const rest = path.slice(prefix.length);
    const remote = remoteAllowed ? undefined : remoteOf(req);
    if (remote !== undefined) {
      stats.refused++;
      if (!warnedRemote) {
        warnedRemote = true;
        warnedRemoteServed = true;
        process.stderr.write(
          `mimalloc-pprof: warning: refused ${prefix}/ to ${remote}: heap profiles are served to loopback clients only (set authToken, or allowRemote: true)\n`,
        );
      }
      return serveError(res, 403, 'mimalloc-pprof: profiles are served to loopback clients only (the server sets authToken or allowRemote to change that)');
    }
    if (!token && !warnedRemoteServed && !isLoopbackAddress(req.socket?.remoteAddress)) {
      // allowRemote without a token: heap profiles go to whoever asks; said once per handler
      warnedRemoteServed = true;
      process.stderr.write(`mimalloc-pprof: warning: serving ${prefix}/ to ${req.socket?.remoteAddress ?? 'a remote peer'} without a token (allowRemote): anyone who can reach this port reads the heap profiles\n`);
    }
    if (!authorized(req)) {
      return serveError(res, 401, 'mimalloc-pprof: missing or wrong bearer token', { 'WWW-Authenticate': 'Bearer realm="pprof"' });
    }
    const method = req.method ?? 'GET';
    const readOnly = method === 'GET' || method === 'HEAD';
    if (rest === '' || rest === '/') {
      if (!readOnly) return serveError(res, 405, 'method not allowed', { Allow: 'GET, HEAD' });
      return index(res, `${prefix}/`);
    }
    const name = rest.slice(1);
    if (name === 'symbol') {
      // Profiles from here are already symbolised; pprof asks only for mappings it could not
      // name, and Go's answer for "nothing known" is the count line alone.
      req.resume(); // the addresses are not needed
      res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
      res.end('num_symbols: 1\n');
      return;
    }
    if (!readOnly) return serveError(res, 405, 'method not allowed', { Allow: 'GET, HEAD' });
    if (name === 'cmdline') {
      if (!token) return serveError(res, 403, 'mimalloc-pprof: the command line is served only with a token (the server sets authToken)');
      res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
      res.end(process.argv.join('\x00'));
      return;
    }
    if (name !== 'heap' && name !== 'allocs') return serveError(res, 404, 'Unknown profile');
    serveProfile(name, req, res, url.searchParams).catch((e: unknown) => {
      const status = e instanceof MimallocPprofError && (e.code === 'MPP_ERR_NOT_PRELOADED' || e.code === 'MPP_ERR_VERSION') ? 503 : 500;
      serveError(res, status, `mimalloc-pprof: could not take the profile: ${e instanceof Error ? e.message : String(e)}`);
    });
  };

  return Object.assign(handler, { stats }) as PprofHandler;
}
