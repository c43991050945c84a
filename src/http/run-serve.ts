/**
 * `run --serve [HOST:]PORT`: the /debug/pprof/* endpoints started inside the program run
 * starts (its exit hook imports this once the process is up, src/node/exit-hook.cts), on
 * HOST:PORT (default host 127.0.0.1), with MIMALLOC_PPROF_SERVE_TOKEN as the bearer token when
 * set. One line on stderr says where; the server does not keep the program alive.
 */
import { serve } from './serve.js';

/** `[HOST:]PORT` (an IPv6 host in brackets: `[::1]:6060`), or a message saying what is wrong. */
export function parseServeAddress(spec: string): { host: string; port: number } | string {
  const m = /^(?:(\[[0-9a-fA-F:.]+\]|[^:[\]]+):)?(\d{1,5})$/.exec(spec);
  const port = m ? Number(m[2]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) return `--serve takes [HOST:]PORT like 6060, 127.0.0.1:6060 or [::1]:6060, not ${spec}`;
  const host = m[1] === undefined ? '127.0.0.1' : m[1].replace(/^\[(.*)\]$/, '$1');
  return { host, port };
}

export async function startRunServe(spec: string, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const address = parseServeAddress(spec);
  if (typeof address === 'string') throw new Error(address);
  const token = env.MIMALLOC_PPROF_SERVE_TOKEN || undefined;
  const s = await serve({ host: address.host, port: address.port, ...(token ? { authToken: token } : {}) });
  process.stderr.write(`mimalloc-pprof: serving ${s.url} (pid ${process.pid})\n`);
}
