/**
 * `serve()`: a small HTTP server for `/debug/pprof/*`, for applications without one.
 * Bound to loopback by default. Bound elsewhere, it answers only loopback clients unless
 * `authToken` (whoever sends it) or `allowRemote` is set, as pprofHandler does. Bounded
 * connections with short header and idle timeouts, checked every second, so connections that
 * never finish a request free their slots within seconds; it does not keep the process alive
 * (`unref`) unless asked to.
 */
import { createServer, type Server } from 'node:http';
import { isIP } from 'node:net';

import { pprofHandler, type PprofHandler, type PprofHandlerOptions } from './handler.js';

export interface ServeOptions extends PprofHandlerOptions {
  /** TCP port (default 6060, Go's habit; 0: any free port). */
  port?: number;
  /** Address to bind (default 127.0.0.1). Elsewhere, remote clients need authToken (or allowRemote). */
  host?: string;
  /** Most open connections (default 64). */
  maxConnections?: number;
  /** Let the process exit while the server is listening (default true). */
  unref?: boolean;
}

export interface PprofServer {
  readonly server: Server;
  readonly handler: PprofHandler;
  readonly host: string;
  /** The port bound (the real one when 0 was asked). */
  readonly port: number;
  /** e.g. http://127.0.0.1:6060/debug/pprof/ */
  readonly url: string;
  close(): Promise<void>;
}

const SERVE_KEYS = new Set(['port', 'host', 'maxConnections', 'unref']);

export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1' || host === '[::1]') return true;
  return isIP(host) === 4 && host.startsWith('127.');
}

/** A tokenless start on a non-loopback address has been reported (once per process). */
let warnedTokenless = false;

export async function serve(options: ServeOptions = {}): Promise<PprofServer> {
  const handlerOptions: PprofHandlerOptions = {};
  for (const [k, v] of Object.entries(options)) {
    if (!SERVE_KEYS.has(k)) (handlerOptions as Record<string, unknown>)[k] = v;
  }
  const port = options.port ?? 6060;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new TypeError(`serve: port must be an integer from 0 to 65535`);
  const host = options.host ?? '127.0.0.1';
  const maxConnections = options.maxConnections ?? 64;
  if (!Number.isInteger(maxConnections) || maxConnections < 1) throw new TypeError('serve: maxConnections must be a positive integer');
  const handler = pprofHandler(handlerOptions);
  if (!isLoopback(host) && options.authToken === undefined && !warnedTokenless) {
    warnedTokenless = true; // once per process
    process.stderr.write(
      options.allowRemote === true
        ? `mimalloc-pprof: warning: serving heap profiles on ${host} to anyone (allowRemote without authToken)\n`
        : `mimalloc-pprof: warning: listening on ${host} without a token: only loopback clients are answered, others get 403 (set authToken)\n`,
    );
  }
  // Slots are taken before a request is read, so a connection that never sends one must lose
  // its slot soon: headers within 5 s, idle keep-alive 5 s, checked every second.
  const server = createServer({ connectionsCheckingInterval: 1_000, headersTimeout: 5_000, requestTimeout: 10_000 }, (req, res) => handler(req, res));
  server.maxConnections = maxConnections;
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.removeListener('error', reject);
      resolve();
    });
  });
  if (options.unref !== false) server.unref();
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  const shown = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return {
    server,
    handler,
    host,
    port: bound,
    url: `http://${shown}:${bound}${(options.prefix ?? '/debug/pprof').replace(/\/+$/, '')}/`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((e) => (e ? reject(e) : resolve()));
        server.closeIdleConnections();
      }),
  };
}
