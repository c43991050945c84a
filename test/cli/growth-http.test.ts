/**
 * End to end (issue 29, item 1; the harness: growth-e2e.ts): a small leaking HTTP service of our own
 * (fixtures/leaky-http.mjs: node:http, every request to /item keeps a 64 KiB Buffer in a
 * module-level array, in rememberRequest) under `run --every 1s` at the default sampling
 * interval, driven by this test with about 250 requests a second over keep-alive for 11 s;
 * then `growth --json` on the periodic series. The first three rows of "where memory grows"
 * must name rememberRequest with its file:line (as the chain's function or among the callers
 * carrying its slope), with a significant slope within ±30 % of the true rate (requests
 * answered × 64 KiB over the time they took). Node's default inlining is on: rememberRequest
 * calls Buffer.alloc and is not inlined into its caller in this service (growth-inlined.test.ts
 * has one whose leaking function is).
 * Control: the same check on the cumulative ranking (growth's ranking before issue 29) fails:
 * its first rows are root frames with the same slope.
 */
import { join } from 'node:path';
import { test } from 'node:test';

import { root } from '../helpers.js';
import { driveItems, growthEndToEnd } from './growth-e2e.js';

const RATE = 250; // requests a second: about 2750 blocks of which q = 0.118 are sampled at the default interval: a relative standard error of sqrt((1-q)/(2750 q)), near 5 %, so ±30 % is about six of them
const SECONDS = 11;

test('a leaking node:http service under run --every 1s: growth\'s first 3 rows name the leaking function with file:line at its rate (±30 %)', async () => {
  await growthEndToEnd({
    app: join(root, 'test', 'cli', 'fixtures', 'leaky-http.mjs'),
    fn: 'rememberRequest',
    line: 9,
    kept: 64 << 10,
    seconds: SECONDS,
    drive: (port) => driveItems(port, RATE, SECONDS),
  });
});
