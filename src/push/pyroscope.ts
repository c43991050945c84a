/**
 * `pushTo()`: this process's native heap profile pushed to Grafana Pyroscope's `/ingest`
 * every `intervalSeconds`, the way its own clients do: a multipart form with the gzipped
 * pprof in the `profile` field and a `sample_type_config` field, the series name and labels
 * in `name` (`app{k=v,…}`), the window in `from`/`until` (UNIX seconds).
 *
 * Each push covers one window: in-use figures as they are at its end, allocated figures of
 * the window only (so every sample type is marked non-cumulative). Collecting and encoding
 * run in the profiling worker; uploads are asynchronous, one at a time, from a bounded queue
 * (oldest dropped); failures are retried with exponential backoff and jitter, a profile is
 * given up after `retry.attempts` tries, and one line is logged per failure window.
 *
 * `flush()` and `stop()` wait at most their deadline (default 5 s), keep the process alive
 * while they wait (a shutdown hook's `await flush()` runs to its end even when nothing else is
 * on the event loop), and resolve with what was sent and what was not.
 */
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

import { requireAddon } from '../node/addon.js';
import { FailureWindow, stderrLogger, type Logger } from '../node/failure-window.js';
import { startJsHeap } from '../node/js-heap.js';
import { checkStartOptions, profiler, type StartOptions } from '../node/profiler.js';
import { snapshots, type Lease } from '../node/snapshots.js';

export interface PushOptions {
  /** The Pyroscope server (`http://pyroscope:4040`) or its ingest URL (`…/ingest`). */
  url: string;
  /** The application's name: Pyroscope's service_name. */
  appName: string;
  /** Series labels (name: [a-zA-Z_][a-zA-Z0-9_.]*; values without {},= or newlines). */
  labels?: Record<string, string>;
  /** Seconds per window (default 15). */
  intervalSeconds?: number;
  /** Sent as `Authorization: Bearer <token>`. */
  authToken?: string;
  /** Sent as `X-Scope-OrgID` (multi-tenant Pyroscope). */
  tenantId?: string;
  /** Further request headers. */
  headers?: Record<string, string>;
  /** Per upload (default 10 000 ms). */
  timeoutMs?: number;
  /** Profiles waiting to be sent; the oldest is dropped beyond it (default 8). */
  maxQueue?: number;
  /** Retries: tries per profile (default 5), first delay (1 000 ms), largest delay (30 000 ms). */
  retry?: { attempts?: number; initialDelayMs?: number; maxDelayMs?: number };
  /** Start the profiler (accum on) when it is not running (default true); or the start options. */
  autoStart?: boolean | StartOptions;
  /** Where the one line per failure window goes (default stderr). */
  logger?: Logger;
  /** How long flush() and stop() wait at most, by default (default 5 000 ms). */
  deadlineMs?: number;
}

/** What a flush() or stop() achieved. */
export interface PushResult {
  /** Profiles the server accepted while it waited. */
  sent: number;
  /** Profiles given up on while it waited (attempts exhausted, a 4xx, queue overflow). */
  failed: number;
  /** Profiles not sent when it resolved: still queued (flush), or dropped unsent (stop). */
  pending: number;
  /** true: it resolved at its deadline with work left. */
  timedOut: boolean;
}

export interface SettleOptions {
  /** Wait at most this long (default: pushTo's deadlineMs, 5 000 ms). */
  deadlineMs?: number;
}

export interface PushStats {
  /** false: the profiler is not available in this process (no preload, or it could not
   * start); nothing is collected or sent, and `reason` says why (logged once). */
  available: boolean;
  reason?: string;
  /** Windows collected. */
  collected: number;
  /** Profiles the server accepted. */
  pushed: number;
  /** Upload attempts that failed. */
  failedAttempts: number;
  /** Profiles given up on (attempts exhausted, a 4xx answer, or queue overflow). */
  dropped: number;
  /** Profiles waiting. */
  queued: number;
  /** Lines logged. */
  logged: number;
}

export interface Pusher {
  readonly stats: PushStats;
  /** Collects the current window now and waits until the queue is empty or the deadline
   * (a number: the deadline in ms); the process stays alive meanwhile. */
  flush(options?: number | SettleOptions): Promise<PushResult>;
  /** Stops collecting; sends the last window and what is queued until the deadline, then
   * drops the rest and abandons an upload under way. */
  stop(options?: SettleOptions): Promise<PushResult>;
}

const KEYS = new Set([
  'url',
  'appName',
  'labels',
  'intervalSeconds',
  'authToken',
  'tenantId',
  'headers',
  'timeoutMs',
  'maxQueue',
  'retry',
  'autoStart',
  'logger',
  'deadlineMs',
]);

/** What every pushed profile declares about its sample types (Pyroscope's SampleTypeConfig). */
export const SAMPLE_TYPE_CONFIG = {
  inuse_objects: { units: 'objects', aggregation: 'average', cumulative: false },
  inuse_space: { units: 'bytes', aggregation: 'average', cumulative: false },
  alloc_objects: { units: 'objects', aggregation: 'sum', cumulative: false },
  alloc_space: { units: 'bytes', aggregation: 'sum', cumulative: false },
} as const;

const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_.]*$/;
const BAD_VALUE = /[{},=\r\n]/;

/** The `name` query parameter: `app{k=v,…}` (labels sorted). */
export function seriesName(appName: string, labels: Record<string, string> = {}): string {
  if (typeof appName !== 'string' || appName === '' || BAD_VALUE.test(appName) || /\s/.test(appName)) {
    throw new TypeError(`pushTo: appName must be a non-empty name without spaces or {},=, not '${String(appName)}'`);
  }
  const parts: string[] = [];
  for (const [k, v] of Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (!LABEL_NAME.test(k) || k.startsWith('__')) throw new TypeError(`pushTo: label name '${k}' is not allowed`);
    if (typeof v !== 'string' || BAD_VALUE.test(v)) throw new TypeError(`pushTo: label ${k} must be a string without {},= or newlines`);
    parts.push(`${k}=${v}`);
  }
  return parts.length > 0 ? `${appName}{${parts.join(',')}}` : appName;
}

/** A multipart/form-data body of file fields, as Go's mime/multipart CreateFormFile writes them. */
export function multipart(fields: { name: string; filename: string; data: Uint8Array }[]): { body: Buffer; contentType: string } {
  const boundary = randomBytes(24).toString('hex');
  const chunks: Buffer[] = [];
  for (const f of fields) {
    chunks.push(
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="${f.name}"; filename="${f.filename}"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      ),
      Buffer.from(f.data.buffer, f.data.byteOffset, f.data.byteLength),
      Buffer.from('\r\n'),
    );
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

interface Item {
  body: Buffer;
  contentType: string;
  from: number;
  until: number;
  attempts: number;
}

type Outcome = { ok: true } | { ok: false; retry: boolean; reason: string };

function post(url: URL, body: Buffer, headers: Record<string, string>, timeoutMs: number, signal: AbortSignal): Promise<Outcome> {
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<Outcome>((resolve) => {
    let done = false;
    const finish = (o: Outcome) => {
      if (!done) {
        done = true;
        resolve(o);
      }
    };
    const req = request(url, { method: 'POST', headers: { ...headers, 'Content-Length': String(body.length) }, timeout: timeoutMs, signal }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        if (size < 1024) chunks.push(c);
        size += c.length;
      });
      res.on('error', (e) => finish({ ok: false, retry: true, reason: e.message }));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) return finish({ ok: true });
        const text = Buffer.concat(chunks).toString('utf8').slice(0, 200).replace(/\s+/g, ' ').trim();
        finish({ ok: false, retry: status >= 500 || status === 429 || status === 408, reason: `HTTP ${status}${text ? ` ${text}` : ''}` });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (e: NodeJS.ErrnoException) => finish({ ok: false, retry: true, reason: e.code ? `${e.code} ${e.message}` : e.message }));
    req.end(body);
  });
}

/** The pusher of a process where the profiler is unavailable: stats say so, calls do nothing. */
function inertPusher(reason: string): Pusher {
  const stats: PushStats = { available: false, reason, collected: 0, pushed: 0, failedAttempts: 0, dropped: 0, queued: 0, logged: 1 };
  const none: PushResult = { sent: 0, failed: 0, pending: 0, timedOut: false };
  return { stats, flush: () => Promise.resolve({ ...none }), stop: () => Promise.resolve({ ...none }) };
}

function positive(name: string, v: unknown, dflt: number, min = 1): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min) throw new TypeError(`pushTo: ${name} must be a number of at least ${min}`);
  return v;
}

/**
 * Starts pushing (see the file comment). Throws TypeError for a bad option, which is a bug
 * in the caller; never throws for the profiler: without the preload (or when it cannot
 * start) it logs one line and returns a pusher that does nothing, `stats.available` false.
 * Never throws or blocks afterwards.
 */
export function pushTo(options: PushOptions): Pusher {
  if (typeof options !== 'object' || options === null) throw new TypeError('pushTo: options are required');
  for (const k of Object.keys(options)) if (!KEYS.has(k)) throw new TypeError(`pushTo: unknown option '${k}'`);
  let base: URL;
  try {
    base = new URL(options.url);
  } catch {
    throw new TypeError(`pushTo: url is not a URL: ${String(options.url)}`);
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new TypeError('pushTo: url must be http: or https:');
  const name = seriesName(options.appName, options.labels);
  const intervalMs = positive('intervalSeconds', options.intervalSeconds, 15) * 1000;
  const timeoutMs = positive('timeoutMs', options.timeoutMs, 10_000);
  const maxQueue = positive('maxQueue', options.maxQueue, 8);
  const attempts = positive('retry.attempts', options.retry?.attempts, 5);
  const initialDelayMs = positive('retry.initialDelayMs', options.retry?.initialDelayMs, 1000, 0);
  const maxDelayMs = positive('retry.maxDelayMs', options.retry?.maxDelayMs, 30_000, 0);
  const autoStart = options.autoStart ?? true;
  const startOptions: StartOptions = autoStart === true ? { accum: true } : autoStart === false ? {} : { accum: true, ...autoStart };
  if (autoStart !== false) checkStartOptions(startOptions);
  const logger = options.logger ?? stderrLogger;
  const defaultDeadlineMs = positive('deadlineMs', options.deadlineMs, 5_000, 0);
  try {
    requireAddon();
    if (autoStart !== false && !profiler.isRunning()) profiler.start(startOptions);
    // the JavaScript heap beside the native one (heap=js samples), unless the start options say no
    if (autoStart !== false && startOptions.jsHeap !== false) startJsHeap(profiler.stats().sampleInterval || 524288);
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e);
    try {
      logger(`mimalloc-pprof: push to ${base.origin} is off: ${reason}`);
    } catch {
      // a logger that throws must not break the caller
    }
    return inertPusher(reason);
  }

  const ingest = new URL(base.href);
  if (!/\/ingest\/?$/.test(ingest.pathname)) ingest.pathname = `${ingest.pathname.replace(/\/+$/, '')}/ingest`;
  const headers: Record<string, string> = { 'User-Agent': 'mimalloc-pprof', ...(options.headers ?? {}) };
  if (options.authToken) headers.Authorization = `Bearer ${options.authToken}`;
  else if (base.username) {
    headers.Authorization = `Basic ${Buffer.from(`${decodeURIComponent(base.username)}:${decodeURIComponent(base.password)}`).toString('base64')}`;
  }
  ingest.username = '';
  ingest.password = '';
  if (options.tenantId) headers['X-Scope-OrgID'] = options.tenantId;
  const config = new TextEncoder().encode(JSON.stringify(SAMPLE_TYPE_CONFIG));
  const failures = new FailureWindow(logger, `push to ${ingest.origin}${ingest.pathname}`);

  const queue: Item[] = [];
  const stats: PushStats = { available: true, collected: 0, pushed: 0, failedAttempts: 0, dropped: 0, queued: 0, logged: 0 };
  let stopped = false;
  let previous: Lease | undefined;
  let previousNs = 0n;
  let collecting: Promise<void> | undefined;
  let sending = false;
  let consecutive = 0;
  let wake: (() => void) | undefined;
  let wait: NodeJS.Timeout | undefined;
  const idle: (() => void)[] = [];
  const abort = new AbortController(); // stop(): the upload under way is abandoned

  const sync = () => {
    stats.queued = queue.length;
    stats.logged = failures.logged;
    if (queue.length === 0 && !sending) for (const f of idle.splice(0)) f();
  };

  const collect = (): Promise<void> =>
    (collecting ??= (async () => {
      try {
        const lease = await snapshots.acquire();
        if (stopped) {
          lease.release();
          return;
        }
        const prev = previous;
        const fromNs = prev ? previousNs : lease.timeNs - BigInt(intervalMs) * 1_000_000n;
        previous = lease;
        previousNs = lease.timeNs;
        if (!prev) return; // the first snapshot only opens the first window
        try {
          const data = await lease.window(prev, fromNs, lease.timeNs);
          const { body, contentType } = multipart([
            { name: 'profile', filename: 'profile.pprof', data },
            { name: 'sample_type_config', filename: 'sample_type_config.json', data: config },
          ]);
          stats.collected++;
          queue.push({ body, contentType, from: Number(fromNs / 1_000_000_000n), until: Number(lease.timeNs / 1_000_000_000n), attempts: 0 });
          while (queue.length > maxQueue) {
            queue.shift();
            stats.dropped++;
          }
        } finally {
          prev.release();
        }
        sync();
        void send();
      } catch (e) {
        failures.fail(`collecting the profile: ${e instanceof Error ? e.message : String(e)}`, 'the next window is tried as scheduled');
        sync();
      } finally {
        collecting = undefined;
      }
    })());

  const send = async () => {
    if (sending) return;
    sending = true;
    try {
      while (queue.length > 0 && !stopped) {
        const item = queue[0]!;
        const q = new URLSearchParams({ name, from: String(item.from), until: String(Math.max(item.until, item.from + 1)), spyName: 'mimalloc-pprof' });
        const target = new URL(ingest.href);
        target.search = q.toString();
        const outcome = await post(target, item.body, { ...headers, 'Content-Type': item.contentType }, timeoutMs, abort.signal);
        if (stopped) break;
        if (outcome.ok) {
          if (queue[0] === item) queue.shift();
          stats.pushed++;
          consecutive = 0;
          failures.ok();
          sync();
          continue;
        }
        item.attempts++;
        stats.failedAttempts++;
        consecutive++;
        const giveUp = !outcome.retry || item.attempts >= attempts;
        failures.fail(outcome.reason, `retrying with backoff; a profile is given up after ${attempts} tries`);
        if (giveUp && queue[0] === item) {
          queue.shift();
          stats.dropped++;
        }
        sync();
        if (queue.length === 0 || stopped) break;
        const delay = Math.min(maxDelayMs, initialDelayMs * 2 ** (consecutive - 1)) * (0.5 + Math.random() / 2);
        await new Promise<void>((resolve) => {
          wake = resolve;
          wait = setTimeout(resolve, delay);
          wait.unref();
        });
        wake = undefined;
      }
    } finally {
      sending = false;
      sync();
    }
  };

  const timer = setInterval(() => void collect(), intervalMs);
  timer.unref();
  void collect(); // opens the first window

  const deadlineOf = (o: number | SettleOptions | undefined): number => {
    const ms = typeof o === 'number' ? o : o?.deadlineMs;
    return ms === undefined ? defaultDeadlineMs : positive('deadlineMs', ms, defaultDeadlineMs, 0);
  };

  /**
   * The last window collected and the queue sent, until `deadlineMs`. The deadline's timer is
   * ref'ed: it is what keeps a process whose event loop holds nothing else (the retries' own
   * timers are unref'ed) alive until the flush resolves.
   */
  const settle = async (deadlineMs: number): Promise<PushResult> => {
    const pushed = stats.pushed;
    const dropped = stats.dropped;
    let keepAlive: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      keepAlive = setTimeout(() => resolve('late'), deadlineMs);
      // MIMALLOC_PPROF_TEST_FLUSH_UNREF=1: the tests' control (test/push/flush.test.ts)
      if (process.env.MIMALLOC_PPROF_TEST_FLUSH_UNREF === '1') keepAlive.unref();
    });
    const work = (async () => {
      await collect();
      if (!previous || stopped) return;
      await collect(); // the window up to now
      if (queue.length === 0 && !sending) return;
      await new Promise<void>((resolve) => idle.push(resolve));
    })();
    const outcome = await Promise.race([work.then(() => 'done' as const), late]);
    clearTimeout(keepAlive);
    return { sent: stats.pushed - pushed, failed: stats.dropped - dropped, pending: queue.length, timedOut: outcome === 'late' };
  };

  let stopping: Promise<PushResult> | undefined;

  return {
    stats,
    flush(o?: number | SettleOptions) {
      if (stopped) return Promise.resolve({ sent: 0, failed: 0, pending: 0, timedOut: false });
      return settle(deadlineOf(o));
    },
    stop(o?: SettleOptions) {
      return (stopping ??= (async () => {
        clearInterval(timer);
        const deadlineMs = deadlineOf(o);
        const result = deadlineMs > 0 ? await settle(deadlineMs) : { sent: 0, failed: 0, pending: queue.length, timedOut: false };
        stopped = true;
        abort.abort();
        if (wait) clearTimeout(wait);
        wake?.();
        stats.dropped += queue.length;
        queue.length = 0;
        previous?.release();
        previous = undefined;
        sync();
        for (const f of idle.splice(0)) f();
        return result;
      })());
    },
  };
}
