/**
 * End to end (issue 29, acceptance; the harness: growth-e2e.ts): an express service of our own
 * that leaks (fixtures/leaky-express.mjs: every GET /session/:id keeps a 64 KiB Buffer in a
 * module-level Map that is never evicted, in rememberSession), driven by autocannon (its
 * programmatic API, 250 requests a second over 4 keep-alive connections for 11 s).
 */
import { join } from 'node:path';
import { test } from 'node:test';

import autocannon from 'autocannon';

import { root } from '../helpers.js';
import { growthEndToEnd } from './growth-e2e.js';

const RATE = 250; // as growth-http: a standard error near 5 %
const SECONDS = 11;

test('a leaking express service under autocannon and run --every 1s: growth\'s first 3 rows name the leaking function with file:line at its rate (±30 %)', async () => {
  await growthEndToEnd({
    app: join(root, 'test', 'cli', 'fixtures', 'leaky-express.mjs'),
    fn: 'rememberSession',
    line: 11,
    kept: 64 << 10,
    seconds: SECONDS,
    drive: async (port) => {
      const result = await autocannon({ url: `http://127.0.0.1:${port}/session/user-42`, connections: 4, overallRate: RATE, duration: SECONDS });
      return { answered: result['2xx'], seconds: result.duration };
    },
  });
});
