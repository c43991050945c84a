/**
 * `run --serve [HOST:]PORT`: the /debug/pprof/* endpoints started inside the program run
 * starts (its exit hook imports this once the process is up, src/node/exit-hook.cts), on
 * HOST:PORT (default host 127.0.0.1), with MIMALLOC_PPROF_SERVE_TOKEN as the bearer token when
 * set. One line on stderr says where; the server does not keep the program alive.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { parseServeAddress } from './serve-address.js';
import { serve } from './serve.js';

export { parseServeAddress };

export async function startRunServe(spec: string, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const address = parseServeAddress(spec);
  if (typeof address === 'string') throw new Error(address);
  const token = env.MIMALLOC_PPROF_SERVE_TOKEN || undefined;
  const s = await serve({ host: address.host, port: address.port, ...(token ? { authToken: token } : {}) });
  // `run --live` reads where from the run's folder (0600, as everything there)
  const dir = env.MIMALLOC_PPROF_RUN_DIR;
  if (dir) writeFileSync(join(dir, `serve.${process.pid}.json`), JSON.stringify({ url: s.url }), { mode: 0o600 });
  if (env.MIMALLOC_PPROF_LIVE !== '1') process.stderr.write(`mimalloc-pprof: serving ${s.url} (pid ${process.pid})\n`);
}
